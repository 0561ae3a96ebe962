// Passwords in DATABASE_URL / DATABASE_DIRECT_URL / MQTT_URL / AUTH_JWKS_URL, and AUTH_JWT_SECRET, never reach an error message or stderr.
import { expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { maskUrl, maskUrlList } from "../lib/platform/redact.ts";
import { databaseModeLine } from "../lib/platform/pooler.ts";
import { banner } from "../dev/output.ts";
import { authEnv } from "../testkit/auth.ts";

const SECRET = "s3cret";

test.each([
  ["postgres://app:s3cret@db/x", "postgres://app:***@db/x"],
  ["mqtts://device:s3cret@broker:8883", "mqtts://device:***@broker:8883"],
  ["postgres://app@db/x", "postgres://app@db/x"],
  ["postgres://db:5432/x", "postgres://db:5432/x"],
  // Unparsable (port out of range, no scheme, a password with "@"): still masked.
  ["postgres://u:s3cret@h:99999/db", "postgres://u:***@h:99999/db"],
  ["u:s3cret@h", "u:***@h"],
  ["postgres//u:s3cret@h/x", "postgres//u:***@h/x"],
  ["postgres://u:s3@cret@h/db", "postgres://u:***@h/db"],
  ["not a url", "not a url"],
  // libpq's host lists, which the URL parser refuses: the password masked, the hosts kept.
  ["postgres://app:s3cret@db-a:5432,db-b:5433/x?target_session_attrs=read-write", "postgres://app:***@db-a:5432,db-b:5433/x?target_session_attrs=read-write"],
  ["postgres://app:s3cret@db-a,db-b/x?application_name=a@b", "postgres://app:***@db-a,db-b/x?application_name=a@b"],
  ["postgres://app:s3/cret@db-a,db-b/x", "postgres://app:***@db-a,db-b/x"],
  ["postgres://app:s3@cret@db-a,db-b/x", "postgres://app:***@db-a,db-b/x"],
  ["postgres://app@db-a,db-b/x", "postgres://app@db-a,db-b/x"],
])("maskUrl(%p) = %p", (input, masked) => {
  expect(maskUrl(input)).toBe(masked);
});

test("maskUrlList masks every broker of MQTT_URL's list, and keeps the rest", () => {
  expect(maskUrlList(["mqtt://u:s3cret@a:1883", "mqtts://b:8883", "wss://u:s3cret@c/mqtt"])).toBe("mqtt://u:***@a:1883,mqtts://b:8883,wss://u:***@c/mqtt");
});

function configError(env: Record<string, string>): string {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error("expected a ConfigError");
}

test.each([
  ["DATABASE_URL", "postgres://u:s3cret@h:99999/db"],
  ["DATABASE_URL", "postgres://u:s3cret@[h/db"],
  ["DATABASE_URL", "mysql://u:s3cret@h:5432/db"],
  ["DATABASE_URL", "u:s3cret@h:5432/db"],
  ["DATABASE_DIRECT_URL", "postgres://u:s3cret@h:99999/db"],
  ["DATABASE_DIRECT_URL", "mysql://u:s3cret@h:5432/db"],
  ["DATABASE_URL", "postgres://u:s3cret@h1,,h2/db"],
  ["DATABASE_URL", "postgres://u:s3cret@h1:5432,h2:99999/db"],
  ["DATABASE_URL", "postgres://u:s3/cret@h1,h2/db"],
  ["DATABASE_URL", "postgres://u:s3@cret@h1,h2/db"],
  ["DATABASE_URL", "postgres://u:s3cret@h1,h2/db?target_session_attrs=standby"],
  ["MQTT_URL", "mqtt://u:s3cret@h:99999"],
  ["MQTT_URL", "http://u:s3cret@h:1883"],
  ["MQTT_URL", "mqtt://u:s3cret@a:1883,mqtt://u:s3cret@b:99999"],
  ["MQTT_URL", "mqtt://u:s3cret@a:1883,http://u:s3cret@b:1883"],
  ["MQTT_URL", "mqtt://u:s3cret@a:1883,mqtt://u:s3cret@a:1883"],
  ["MQTT_URL", "mqtt://u:s3cret@a:1883,u:s3cret@b"],
  ["AUTH_JWKS_URL", "ftp://u:s3cret@idp/jwks"],
  ["AUTH_JWT_SECRET", "s3cret-but-shorter-than-32"],
])("a bad %s names the variable and never echoes the password (%p)", (name, value) => {
  // DATABASE_DIRECT_URL is read behind a pooler only.
  const message = configError({ DATABASE_POOLER: "transaction", [name]: value });
  expect(message).toContain(name);
  expect(message).not.toContain(SECRET);
});

test("the start-up line on the database names both URLs with their passwords masked", () => {
  const config = loadConfig({ DATABASE_URL: "postgres://app:s3cret@pgbouncer:6432/x", DATABASE_POOLER: "transaction", DATABASE_DIRECT_URL: "postgres://app:s3cret@db:5432/x" });
  const line = JSON.stringify(databaseModeLine(config, { listen: { pollMs: 1000 }, locks: "ops job locks" }));
  expect(line).toContain("postgres://app:***@pgbouncer:6432/x");
  expect(line).toContain("postgres://app:***@db:5432/x");
  expect(line).not.toContain(SECRET);
});

async function runEntry(argv: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(["bun", ...argv], {
    cwd: `${import.meta.dir}/..`,
    env: { ...process.env, PORT: "0", RELAY_PORT: "0", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

test.each([["api.ts"], ["relay.ts"], ["migrate.ts"], ["ops.ts reconcile"]])(
  "bun %s with an unparsable DATABASE_URL carrying a password: one line without it, exit 1",
  async (command: string) => {
    const { code, stdout, stderr } = await runEntry(command.split(" "), { DATABASE_URL: "postgres://u:s3cret@h:99999/db" });
    expect(code).toBe(1);
    const lines = stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("DATABASE_URL");
    expect(lines[0]).toContain("postgres://u:***@h:99999/db");
    expect(stdout + stderr).not.toContain(SECRET);
  },
);

test.each([["api.ts"], ["relay.ts"]])("bun %s with a bad host list carrying a password: one line naming DATABASE_URL, without it, exit 1", async (entry) => {
  const { code, stdout, stderr } = await runEntry([entry], { DATABASE_URL: "postgres://u:s3cret@h1:5432,,h2/db?target_session_attrs=read-write", ...authEnv() });
  expect(code).toBe(1);
  const lines = stderr.trim().split("\n");
  expect(lines).toEqual(['configuration error: DATABASE_URL has a bad host list: entry 2 is empty: "postgres://u:***@h1:5432,,h2/db?target_session_attrs=read-write"']);
  expect(stdout + stderr).not.toContain(SECRET);
});

test("bun api.ts with an unreachable database whose URL has a password: one line without it, exit 1", async () => {
  const { code, stdout, stderr } = await runEntry(["api.ts"], { DATABASE_URL: "postgres://u:s3cret@127.0.0.1:1/none", ...authEnv() });
  expect(stderr).toContain("DATABASE_URL");
  expect(code).toBe(1);
  expect(stderr.trim().split("\n")).toHaveLength(1);
  expect(stdout + stderr).not.toContain(SECRET);
});

test("bun run dev's banner shows DATABASE_URL, DATABASE_DIRECT_URL and MQTT_URL with their passwords masked, a host list whole", () => {
  const lines = banner({
    api: "http://127.0.0.1:3000",
    relay: "http://127.0.0.1:9465",
    databaseUrl: "postgres://app:s3cret@db-a:5432,db-b:5432/charges?target_session_attrs=read-write",
    databaseNote: "(from DATABASE_URL)",
    databaseDirectUrl: "postgres://app:s3cret@db-a:5432/charges",
    mqttUrl: "mqtts://device:s3cret@broker:8883",
    mqttNote: "(from MQTT_URL)",
    authorization: undefined,
    authNote: "none",
  }).join("\n");
  expect(lines).not.toContain(SECRET);
  expect(lines).toContain("postgres://app:***@db-a:5432,db-b:5432/charges?target_session_attrs=read-write");
  expect(lines).toContain("mqtts://device:***@broker:8883");
  expect(lines).toContain("postgres://app:***@db-a:5432/charges");
});

test.each([["api.ts"], ["relay.ts"], ["ops.ts completer"]])(
  "bun %s with PAYMENT_PROCESSOR_KEY set and a bad processor value: one line naming the value, never the key, exit 1",
  async (command: string) => {
    const key = `sk_test_${SECRET}_0123456789`;
    const { code, stdout, stderr } = await runEntry(command.split(" "), { ...authEnv(), PAYMENT_PROCESSOR: "stripe", PAYMENT_PROCESSOR_KEY: key, PAYMENT_PROCESSOR_URL: `ftp://${key}@processor` });
    expect(code).toBe(1);
    expect(stderr.trim().split("\n")).toEqual([expect.stringContaining("PAYMENT_PROCESSOR_URL")]);
    expect(stdout + stderr).not.toContain(key);
  },
);
