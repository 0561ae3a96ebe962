// The interactive API reference's assets, served by the API itself from the installed
// swagger-ui-dist package, so /docs works with no network and no CDN. Each file is read on its
// first request and kept, compressed and tagged (asset-answer.ts): nothing is read at import or
// at start.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { DocsAssets } from "./app.ts";
import { ASSET_CACHE_CONTROL, assetAnswer, type Asset } from "./asset-answer.ts";

const SCRIPT = "/docs/swagger-ui-bundle.js";
const STYLESHEET = "/docs/swagger-ui.css";

/** swagger-ui-dist's bundle and stylesheet, under /docs. */
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
