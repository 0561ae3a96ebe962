// A static answer of the documentation routes, made once: gzip, a weak ETag, Cache-Control, 304.
// Web APIs only (CompressionStream, Web Crypto): the edge worker serves the document too.

// The files change only with the installed package, and a deploy restarts the process.
export const ASSET_CACHE_CONTROL = "public, max-age=86400";
// The document and its page change with a deploy: a client asks each time, and gets a 304.
export const DOCUMENT_CACHE_CONTROL = "no-cache";

export type Asset = { readonly body: Uint8Array<ArrayBuffer>; readonly contentType: string };

type Prepared = Asset & { readonly gzip: Uint8Array<ArrayBuffer>; readonly etag: string };

/** The answer to a GET of what `make` makes on the first request (again only if that failed). */
export function assetAnswer(make: () => Promise<Asset>, cacheControl: string): (request: Request) => Promise<Response> {
  let prepared: Promise<Prepared> | undefined;
  return async (request) => {
    prepared ??= make()
      .then(prepare)
      .catch((error: unknown) => {
        prepared = undefined;
        throw error;
      });
    const asset = await prepared;
    const headers: Record<string, string> = { etag: asset.etag, "cache-control": cacheControl, vary: "accept-encoding" };
    if (matches(request.headers.get("if-none-match"), asset.etag)) return new Response(null, { status: 304, headers });
    headers["content-type"] = asset.contentType;
    if (!acceptsGzip(request.headers.get("accept-encoding"))) return new Response(asset.body, { headers });
    headers["content-encoding"] = "gzip";
    return new Response(asset.gzip, { headers });
  };
}

async function prepare(asset: Asset): Promise<Prepared> {
  const compressed = new Response(new Blob([asset.body]).stream().pipeThrough(new CompressionStream("gzip")));
  const gzip = new Uint8Array(await compressed.arrayBuffer());
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", asset.body));
  // Weak: one tag for both encodings of the same bytes (RFC 9110 §8.8.1).
  const etag = `W/"${Array.from(digest.subarray(0, 12), (b) => b.toString(16).padStart(2, "0")).join("")}"`;
  return { ...asset, gzip, etag };
}

/** If-None-Match: `*` or a list of tags, compared weakly (RFC 9110 §13.1.2). */
function matches(ifNoneMatch: string | null, etag: string): boolean {
  const opaque = etag.slice(2);
  return (ifNoneMatch ?? "").split(",").some((tag) => ["*", etag, opaque].includes(tag.trim()));
}

function acceptsGzip(acceptEncoding: string | null): boolean {
  return (acceptEncoding ?? "").split(",").some((part) => {
    const [coding, ...params] = part.split(";").map((s) => s.trim().toLowerCase());
    if (coding !== "gzip" && coding !== "x-gzip") return false;
    const q = params.find((p) => p.startsWith("q="));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}
