// `bun run client:types`: writes client/openapi.d.ts from the /openapi.json of an in-process
// API (or of a running one: `bun run client:types http://127.0.0.1:3000`).
import { writeFileSync } from "node:fs";
import { CLIENT_TYPES_PATH, servedOpenApi, typesOf } from "../testkit/openapi-types.ts";

async function fetchDocument(base: string): Promise<unknown> {
  const response = await fetch(new URL("/openapi.json", base));
  if (response.status !== 200) throw new Error(`${base}/openapi.json answered ${response.status}`);
  return response.json();
}

if (import.meta.main) {
  const base = process.argv[2];
  try {
    const document = base ? await fetchDocument(base) : await servedOpenApi();
    writeFileSync(CLIENT_TYPES_PATH, await typesOf(document));
    console.log(`client:types: wrote ${CLIENT_TYPES_PATH}`);
    process.exit(0);
  } catch (error) {
    console.error(`client:types: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
}
