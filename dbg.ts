import { startTestApi } from "./testkit/api.ts";
const api = await startTestApi(process.env.DATABASE_URL!);
const r = await api.fetch(new Request("http://localhost/openapi.json"));
console.log(JSON.stringify(await r.json(), null, 1));
await api.close();
