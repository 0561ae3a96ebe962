// The relay's HTTP surface as a health checker or a curious client meets it, over raw
// sockets: HTTP/1.0 without Host, unknown paths and methods, a /readyz while the database is
// away (it says which dependency is down, never why), the bind address, and the start line.
import { afterAll, afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { maskUrl } from "../lib/platform/redact.ts";
import { freePort } from "../dev/ports.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_http");
const { mqttUrl } = await services();
const started: Service[] = [];
afterEach(async () => {
  for (const service of started.splice(0)) await service.child.stop();
});
afterAll(() => db.drop());

interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** Sends `request` as is and reads until the server closes (HTTP/1.0 closes after one answer). */
function raw(port: number, request: string, host = "127.0.0.1"): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ port, host });
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const split = text.indexOf("\r\n\r\n");
      const [statusLine = "", ...lines] = text.slice(0, split).split("\r\n");
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(":");
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      resolve({ status: Number(statusLine.split(" ")[1]), headers, body: text.slice(split + 4) });
    });
    socket.write(request);
  });
}

/** A TCP proxy to the test database that can be cut: the relay's database "goes away". */
async function databaseProxy(target: URL): Promise<{ url: string; cut(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: target.hostname, port: Number(target.port || 5432) });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const url = new URL(target);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  return {
    url: url.toString(),
    async cut() {
      const closed = new Promise((resolve) => server.close(resolve));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

async function relay(env: Record<string, string>, onLine?: (line: string) => void): Promise<Service> {
  const service = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, LOG_LEVEL: "warn", ...env },
    stdout: onLine ?? "ignore",
    ...(env.RELAY_HOST && env.RELAY_HOST !== "127.0.0.1" ? { readyPath: false as const } : {}),
  });
  started.push(service);
  return service;
}

test("HTTP/1.0 without Host: /healthz and /readyz answer 200 JSON; an unknown path 404 and a POST 405, both problem+json", async () => {
  const { port } = await relay({});
  const health = await raw(port, "GET /healthz HTTP/1.0\r\n\r\n");
  expect(health.status).toBe(200);
  expect(health.headers["content-type"]).toStartWith("application/json");
  expect(JSON.parse(health.body)).toEqual({ status: "ok" });

  await waitUntil(async () => (await raw(port, "GET /readyz HTTP/1.0\r\n\r\n")).status === 200, 10_000, "readyz 200 without Host");
  const ready = await raw(port, "GET /readyz?verbose=1 HTTP/1.0\r\n\r\n");
  expect(JSON.parse(ready.body)).toEqual({ status: "ready", database: "up", broker: "connected", brokerUrl: mqttUrl });

  const missing = await raw(port, "GET /nope HTTP/1.0\r\n\r\n");
  expect(missing.status).toBe(404);
  expect(missing.headers["content-type"]).toBe("application/problem+json");
  expect(JSON.parse(missing.body)).toMatchObject({ type: "about:blank", title: "Not Found", status: 404 });

  const post = await raw(port, "POST /healthz HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  expect(post.status).toBe(405);
  expect(post.headers.allow).toBe("GET, HEAD");
  expect(post.headers["content-type"]).toBe("application/problem+json");
  expect(JSON.parse(post.body)).toMatchObject({ title: "Method Not Allowed", status: 405 });

  const shortHost = await raw(port, "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  expect(shortHost.status).toBe(200);
});

test("/readyz with the database gone: 503 naming the database as down, no error text; the reason is in the log", async () => {
  const proxy = await databaseProxy(new URL(db.url));
  const lines: string[] = [];
  const { port } = await relay({ DATABASE_URL: proxy.url }, (line) => lines.push(line));
  await proxy.cut();

  const ready = await waitUntil(async () => {
    const r = await raw(port, "GET /readyz HTTP/1.0\r\n\r\n");
    return r.status === 503 && JSON.parse(r.body).database === "down" && r;
  }, 10_000, "readyz to see the database down");
  expect(ready.headers["content-type"]).toStartWith("application/json");
  expect(JSON.parse(ready.body)).toEqual({ status: "not ready", database: "down", broker: "connected", brokerUrl: mqttUrl });
  const logged = await waitUntil(() => lines.find((l) => l.includes("readiness: database down")), 5000, "the reason logged");
  expect(JSON.parse(logged).error).toBeString();
});

test("RELAY_HOST: the listener binds to that address only", async () => {
  // Every 127.x address is loopback on Linux: bound to 127.0.0.2, nothing answers on 127.0.0.1.
  const { port } = await relay({ RELAY_HOST: "127.0.0.2" });
  const health = await waitUntil(() => raw(port, "GET /healthz HTTP/1.0\r\n\r\n", "127.0.0.2").catch(() => undefined), 10_000, "healthz on 127.0.0.2");
  expect(health.status).toBe(200);
  expect(await raw(port, "GET /healthz HTTP/1.0\r\n\r\n", "127.0.0.1").then(() => "answered", (e: { code?: string }) => e.code)).toBe("ECONNREFUSED");
});

test("the start line names MQTT_URL and DATABASE_URL with their passwords masked, the MQTT connections and the collection pacing", async () => {
  const url = new URL(mqttUrl);
  url.username = "relay";
  url.password = "s3cret-broker-pw";
  const lines: string[] = [];
  await relay({ MQTT_URL: url.toString(), LOG_LEVEL: "info" }, (line) => lines.push(line));
  const startLine = await waitUntil(() => lines.find((l) => l.includes("relay started")), 5000, "the start line");
  expect(JSON.parse(startLine).mqttUrl).toBe(`mqtt://relay:***@${url.host}`);
  expect(JSON.parse(startLine).databaseUrl).toBe(maskUrl(db.url));
  // The relay paces young collections on Bun (lib/platform/gc-pacer.ts) and says so.
  expect(JSON.parse(startLine)).toMatchObject({ mqttConnections: 3, gcEveryRows: 4000 });
  expect(lines.join("\n")).not.toContain("s3cret-broker-pw");
});

test("RELAY_HOST and the relay's time bounds: defaults, and a bad value refused by name", () => {
  expect(loadConfig({})).toMatchObject({ relayHost: "0.0.0.0", relayTimeBounds: { statementTimeoutMs: 30_000, lockTimeoutMs: 10_000 } });
  expect(loadConfig({ RELAY_HOST: "::1" }).relayHost).toBe("::1");
  expect(loadConfig({ RELAY_HOST: "relay.internal" }).relayHost).toBe("relay.internal");
  for (const [name, value] of [
    ["RELAY_HOST", "not a host"],
    ["RELAY_HOST", "http://x"],
    ["RELAY_STATEMENT_TIMEOUT_MS", "0"],
    ["RELAY_LOCK_TIMEOUT_MS", "soon"],
  ] as const) {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  }
});
