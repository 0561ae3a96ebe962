// `bun run migrate`: apply schema.sql and nothing else.
import { configOrExit } from "./lib/shared/config.ts";
import { createSql, describeDbError, migrate } from "./lib/shared/db.ts";

const config = configOrExit(process.env);
const sql = createSql(config.databaseUrl, { max: 1, applicationName: "charges-migrate" });
try {
  const applied = await migrate(sql);
  console.log(applied ? "schema applied" : "schema already current");
  await sql.end({ timeout: 5 });
} catch (error) {
  console.error(`migrate failed: cannot apply schema.sql to DATABASE_URL: ${describeDbError(error)}`);
  await sql.end({ timeout: 1 }).catch(() => {});
  process.exit(1);
}
