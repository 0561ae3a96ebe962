// An OTLP/HTTP receiver on a free loopback port, as a collector would be: it takes the JSON
// exports of /v1/traces (and accepts /v1/metrics and /v1/logs unread), and hands the spans back
// flattened with their resource's service.name, for a test to check the tree of one charge.
import { freePort } from "../dev/ports.ts";

export interface ReceivedSpan {
  readonly service: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  readonly kind: number;
  readonly attributes: Readonly<Record<string, string | number | boolean>>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  readonly status: number;
}

export interface OtlpReceiver {
  readonly endpoint: string;
  spans(): readonly ReceivedSpan[];
  /** The raw bodies, to prove what never appears in any export. */
  bodies(): readonly string[];
  stop(): Promise<void>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpAttribute[];
  status?: { code?: number };
}
interface OtlpTraces {
  resourceSpans?: { resource?: { attributes?: OtlpAttribute[] }; scopeSpans?: { spans?: OtlpSpan[] }[] }[];
}

function valueOf(v: OtlpValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  return v.boolValue ?? "";
}

function attributesOf(list: readonly OtlpAttribute[] | undefined): Record<string, string | number | boolean> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));
}

function flatten(body: OtlpTraces): ReceivedSpan[] {
  return (body.resourceSpans ?? []).flatMap((rs) => {
    const service = String(attributesOf(rs.resource?.attributes)["service.name"] ?? "");
    return (rs.scopeSpans ?? []).flatMap((ss) =>
      (ss.spans ?? []).map((s) => ({
        service,
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ?? "",
        name: s.name,
        kind: s.kind,
        attributes: attributesOf(s.attributes),
        status: s.status?.code ?? 0,
      })),
    );
  });
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const received: ReceivedSpan[] = [];
  const bodies: string[] = [];
  const port = await freePort();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port,
    async fetch(request) {
      const url = new URL(request.url);
      if (request.method !== "POST") return new Response(null, { status: 405 });
      const text = await request.text();
      if (url.pathname === "/v1/traces") {
        if (!(request.headers.get("content-type") ?? "").includes("json")) return new Response("JSON only", { status: 415 });
        bodies.push(text);
        received.push(...flatten(JSON.parse(text) as OtlpTraces));
      }
      return Response.json({});
    },
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans: () => received,
    bodies: () => bodies,
    stop: () => server.stop(true),
  };
}
