// The interactive reference's assets, served from the installed swagger-ui-dist package (no CDN):
// each file read on its first request and kept (asset-answer.ts), nothing at import or start.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { DocsAssets } from "./app.ts";
import { ASSET_CACHE_CONTROL, assetAnswer, type Asset } from "./asset-answer.ts";

const SCRIPT = "/docs/swagger-ui-bundle.js";
const STYLESHEET = "/docs/swagger-ui.css";

export function swaggerUiAssets(): DocsAssets {
  return {
    script: SCRIPT,
    stylesheet: STYLESHEET,
    files: {
      [SCRIPT]: assetAnswer(packageFile("swagger-ui-bundle.js", "text/javascript; charset=utf-8"), ASSET_CACHE_CONTROL),
      [STYLESHEET]: assetAnswer(packageFile("swagger-ui.css", "text/css; charset=utf-8"), ASSET_CACHE_CONTROL),
    },
  };
}

function packageFile(name: string, contentType: string): () => Promise<Asset> {
  return async () => ({ body: new Uint8Array(await readFile(createRequire(import.meta.url).resolve(`swagger-ui-dist/${name}`))), contentType });
}
