// The interactive API reference's assets, served by the API itself from the installed
// swagger-ui-dist package, so /docs works with no network and no CDN. Each file is read on its
// first request and kept: nothing is read at import or at start.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { DocsAssets } from "./app.ts";

const SCRIPT = "/docs/swagger-ui-bundle.js";
const STYLESHEET = "/docs/swagger-ui.css";
// A day: the files change only with the installed package, and a deploy restarts the process.
const CACHE_CONTROL = "public, max-age=86400";

/** swagger-ui-dist's bundle and stylesheet, under /docs. */
export function swaggerUiAssets(): DocsAssets {
  return {
    script: SCRIPT,
    stylesheet: STYLESHEET,
    files: {
      [SCRIPT]: packageFile("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
      [STYLESHEET]: packageFile("swagger-ui.css", "text/css; charset=utf-8"),
    },
  };
}

function packageFile(name: string, contentType: string): () => Promise<Response> {
  let text: Promise<string> | undefined;
  return async () => {
    text ??= readFile(createRequire(import.meta.url).resolve(`swagger-ui-dist/${name}`), "utf8").catch((error: unknown) => {
      text = undefined;
      throw error;
    });
    return new Response(await text, { headers: { "content-type": contentType, "cache-control": CACHE_CONTROL } });
  };
}
