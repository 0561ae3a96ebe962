// `bun run migrate`: apply the pending migrations of migrations/ and nothing else; prints
// each one it applied, or that the schema was already current.
import { configOrExit } from "./lib/platform/config.ts";
import { createSql } from "./lib/platform/db.ts";
import { applySchema, exitOnStartupError } from "./lib/platform/startup.ts";

const config = configOrExit(process.env);
const sql = createSql(config.databaseUrl, { max: 1, applicationName: "charges-migrate", pooler: config.databasePooler });
const applied = await applySchema(sql).catch(exitOnStartupError("migrate"));
for (const name of applied) console.log(`applied ${name}`);
if (applied.length === 0) console.log("schema already current");
await sql.end({ timeout: 5 });
