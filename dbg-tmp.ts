import { startTestApi } from "./testkit/api.ts";
import { createLogger } from "./lib/shared/log.ts";
import { freshDatabase } from "./testkit/services.ts";
const db = await freshDatabase("dbg");
const lines: string[] = [];
const api = await startTestApi(db.url, { LOG_LEVEL: "info" }, { metrics: async () => new Response("m 1\n"), logger: createLogger("info", "api", (l) => lines.push(l)) });
for (const [p, init] of [["/metrics", {}], ["/charges", { method: "POST", headers: { authorization: "Bearer a.b.c", "content-type": "application/json" }, body: "{}" }], ["/nope", { method: "HEAD" }], ["/charges/x", {}]] as const) {
  const r = await api.fetch(new Request("http://localhost" + p, init as RequestInit));
  console.log(p, r.status, (await r.text()).slice(0, 200));
}
await new Promise((r) => setTimeout(r, 20));
console.log(lines.join("\n"));
await api.close(); await db.drop();
