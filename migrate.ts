// `bun run migrate`: apply schema.sql and nothing else.
import { configOrExit } from "./lib/shared/config.ts";
import { createSql } from "./lib/shared/db.ts";
import { applySchema, exitOnStartupError } from "./lib/shared/startup.ts";

const config = configOrExit(process.env);
const sql = createSql(config.databaseUrl, { max: 1, applicationName: "charges-migrate" });
const applied = await applySchema(sql).catch(exitOnStartupError("migrate"));
console.log(applied ? "schema applied" : "schema already current");
await sql.end({ timeout: 5 });
