// The operator console's routes, an Elysia app of its own under /console on the operator
// listener: HTML pages (not signed in: the sign-in page) and data (backlog.json, CSV; 401/403 as
// problems). Every read and action goes through lib/ops, as `bun run ops` does; GETs only read,
// and each POST is checked for its origin and CSRF token before anything else.
import { Elysia } from "elysia";
import { describeDbError } from "../../platform/db.ts";
import type { ProblemSpec } from "../../idempotency/problem-types.ts";
import { specResponse } from "../problem.ts";
import { html, page } from "./html.ts";
import { consoleAssets } from "./assets.ts";
import { csrfMatches, csrfOf, sameOrigin, signInCookies, signOutCookies, tokenOf, type OperatorCheck } from "./auth.ts";
import { actionResultPage, auditPage, findPage, forbiddenPage, homePage, listResultPage, refusedPage, signInPage } from "./pages.ts";
import { chargePage } from "./charge-page.ts";
import { confirmPage, listPage, PAGE_SIZE } from "./list-page.ts";
import { formOf, listFilterOf, pageNoOf, resolutionOf, safeBack } from "./input.ts";
import { chargeLife, findCharges } from "../../ops/life.ts";
import { isListKind, listNeeds, LIST_KINDS, toCsv, type ListKind } from "../../ops/lists.ts";
import { act, actOnList, isAction, listAudit, LIST_ACTIONS, MAX_LIST_ACTION, type OpsContext } from "../../ops/actions.ts";
import { backlog } from "../../ops/sql.ts";

export interface ConsoleDeps {
  readonly ops: OpsContext;
  readonly check: OperatorCheck;
}

// The form is read here, bounded (input.ts), before Elysia's own parsing would read it unbounded.
const FORM = { parse: ({ request }: { request: Request }) => formOf(request) };
const formBody = (body: unknown): URLSearchParams => (body instanceof URLSearchParams ? body : new URLSearchParams());

const FORBIDDEN: ProblemSpec = { slug: "forbidden", title: "Forbidden", status: 403 };
const UNAUTHORIZED: ProblemSpec = { slug: "unauthorized", title: "Unauthorized", status: 401 };
// A CSV export reads at most this many entries: a larger list is narrowed by its filter.
const MAX_EXPORT = 10_000;

interface Session {
  readonly operator: string;
  readonly csrf: string;
  readonly setCookie: string | undefined;
}

type Gate = (request: Request) => Promise<Session | Response>;

interface Gates {
  readonly page: Gate;
  readonly data: Gate;
}

function gates(check: OperatorCheck): Gates {
  const gate = (asPage: boolean): Gate => async (request) => {
    const verdict = await check(tokenOf(request));
    if (verdict.kind === "operator") return { operator: verdict.name, ...csrfTokenOf(request) };
    if (verdict.kind === "forbidden") return asPage ? forbiddenPage() : specResponse(FORBIDDEN, "the token's scope does not hold charges:operate");
    return asPage ? signInPage(verdict.why) : specResponse(UNAUTHORIZED, "sign in with an operator token (scope charges:operate)", {}, { "www-authenticate": 'Bearer scope="charges:operate"' });
  };
  return { page: gate(true), data: gate(false) };
}

function csrfTokenOf(request: Request): { csrf: string; setCookie: string | undefined } {
  const { token, setCookie } = csrfOf(request);
  return { csrf: token, setCookie };
}

function withSession(session: Session, response: Response): Response {
  if (session.setCookie) response.headers.append("set-cookie", session.setCookie);
  return response;
}

export function createConsole(deps: ConsoleDeps): (request: Request) => Promise<Response> {
  const gate = gates(deps.check);
  const app = new Elysia({ aot: false })
    .onError(({ code, error }) => {
      if (code === "NOT_FOUND") return page({ title: "Not found" }, html`<p><a href="/console">The console</a></p>`, 404);
      deps.ops.log.error("console request failed", { error: describeDbError(error) });
      return page({ title: "Error" }, html`<p>An unexpected error occurred; the API's log has it.</p>`, 500);
    })
    .use(sessionRoutes(deps))
    .use(readRoutes(deps, gate))
    .use(listRoutes(deps, gate))
    .use(actionRoutes(deps, gate));
  return (request) => app.handle(request);
}

function sessionRoutes(deps: ConsoleDeps) {
  const assets = consoleAssets();
  return new Elysia({ name: "console-session" })
    .get("/console/assets/:name", ({ request }) => assets.get(new URL(request.url).pathname)?.() ?? new Response("not found", { status: 404 }))
    .get("/console/sign-in", async ({ request }) => signIn(deps.check, request, new URL(request.url).searchParams.get("token") ?? undefined))
    .post("/console/sign-in", async ({ request, body }) => (sameOrigin(request) ? signIn(deps.check, request, formBody(body).get("token") ?? undefined) : refusedPage({ title: "" }, 403, "cross-site sign-in refused")), FORM)
    .post("/console/sign-out", async ({ request, body }) => {
      const form = formBody(body);
      if (!sameOrigin(request) || !csrfMatches(request, form.get("csrf") ?? undefined)) return refusedPage({ title: "" }, 403, "cross-site request refused");
      const headers = new Headers({ location: "/console/sign-in" });
      for (const c of signOutCookies(request)) headers.append("set-cookie", c);
      return new Response(null, { status: 303, headers });
    }, FORM);
}

function readRoutes(deps: ConsoleDeps, gate: Gates) {
  const { sql } = deps.ops;
  return new Elysia({ name: "console-read" })
    .get("/console", ({ request }) => withPage(gate.page, request, async (s) => homePage(frameOf(s, "Console"), await countsOf(deps.ops))))
    .get("/console/backlog.json", async ({ request }) => {
      const s = await gate.data(request);
      return s instanceof Response ? s : Response.json(await backlog(sql), { headers: { "cache-control": "no-store" } });
    })
    .get("/console/find", ({ request }) => withPage(gate.page, request, async (s) => {
      const q = new URL(request.url).searchParams;
      const text = q.get("q") ?? "";
      const tenant = q.get("tenant") ?? "";
      const found = await findCharges(sql, { text, tenant });
      // Several matches of one charge (its key and its event, say) open it as one would.
      if (found.length > 0 && found.every((f) => f.chargeId === found[0]!.chargeId)) return new Response(null, { status: 303, headers: { location: `/console/charges/${found[0]!.chargeId}` } });
      return findPage(frameOf(s, "Find"), text, tenant, found);
    }))
    .get("/console/charges/:id", ({ request, params }) => withPage(gate.page, request, async (s) => {
      const life = await chargeLife(sql, params.id);
      return life === undefined ? refusedPage(frameOf(s, ""), 404, "no such charge") : chargePage(frameOf(s, ""), life);
    }))
    .get("/console/audit", ({ request }) => withPage(gate.page, request, async (s) => {
      const pageNo = pageNoOf(new URL(request.url).searchParams);
      const { total, rows } = await listAudit(sql, PAGE_SIZE, (pageNo - 1) * PAGE_SIZE);
      return auditPage(frameOf(s, "Audit"), rows, total, pageNo, PAGE_SIZE);
    }));
}

function listRoutes(deps: ConsoleDeps, gate: Gates) {
  const { sql } = deps.ops;
  return new Elysia({ name: "console-lists" })
    .get("/console/lists/:kind", ({ request, params }) => withList(gate.page, request, params.kind, async (s, kind) => {
      const url = new URL(request.url);
      const filter = listFilterOf(url.searchParams);
      const pageNo = pageNoOf(url.searchParams);
      const result = await listNeeds(sql, kind, filter, { limit: PAGE_SIZE, offset: (pageNo - 1) * PAGE_SIZE });
      return listPage(frameOf(s, ""), kind, filter, result, pageNo);
    }))
    .get("/console/lists/:kind/confirm", ({ request, params }) => withList(gate.page, request, params.kind, async (s, kind) => {
      const q = new URL(request.url).searchParams;
      const action = q.get("action") ?? undefined;
      if (!isAction(action) || !LIST_ACTIONS[kind].includes(action)) return refusedPage(frameOf(s, ""), 400, "that action does not apply to this list");
      const filter = listFilterOf(q);
      const { total } = await listNeeds(sql, kind, filter, { limit: 1, offset: 0 });
      return confirmPage(frameOf(s, ""), kind, action, filter, total, MAX_LIST_ACTION);
    }))
    .get("/console/export/:kind", ({ request, params }) => withList(gate.data, request, params.kind, async (_, kind) => {
      const result = await listNeeds(sql, kind, listFilterOf(new URL(request.url).searchParams), { limit: MAX_EXPORT, offset: 0 });
      return new Response(toCsv(result.rows), { headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": `attachment; filename="${kind}.csv"`, "cache-control": "no-store", "x-content-type-options": "nosniff" } });
    }));
}

const RESOLUTION_NEEDS_VALUE = "a resolution's outcome needs its processor id or code";

function actionRoutes(deps: ConsoleDeps, gate: Gates) {
  return new Elysia({ name: "console-actions" })
    .post("/console/actions", ({ request, body }) => withForm(gate.page, request, body, async (s, form) => {
      const action = form.get("action") ?? undefined;
      if (!isAction(action)) return refusedPage(frameOf(s, ""), 400, "no such action");
      const resolution = resolutionOf(form);
      if (resolution === "invalid") return refusedPage(frameOf(s, ""), 400, RESOLUTION_NEEDS_VALUE);
      const result = await act(deps.ops, { action, target: form.get("target") ?? "", reason: form.get("reason") ?? "", actor: { name: s.operator, via: "console" }, resolution });
      return actionResultPage(frameOf(s, ""), result, safeBack(form.get("back")));
    }), FORM)
    .post("/console/lists/:kind/apply", ({ request, params, body }) => withForm(gate.page, request, body, async (s, form) => {
      const kind = params.kind;
      const action = form.get("action") ?? undefined;
      if (!isListKind(kind) || !isAction(action)) return refusedPage(frameOf(s, ""), 400, "no such list or action");
      const resolution = resolutionOf(form);
      if (resolution === "invalid") return refusedPage(frameOf(s, ""), 400, RESOLUTION_NEEDS_VALUE);
      // The count the operator confirmed must still be the count: otherwise show the new one first.
      const filter = listFilterOf(form);
      const { total } = await listNeeds(deps.ops.sql, kind, filter, { limit: 1, offset: 0 });
      if (form.get("expected") !== String(Math.min(total, MAX_LIST_ACTION)) && LIST_ACTIONS[kind].includes(action)) return confirmPage(frameOf(s, ""), kind, action, filter, total, MAX_LIST_ACTION, 409);
      const result = await actOnList(deps.ops, kind, filter, { action, reason: form.get("reason") ?? "", actor: { name: s.operator, via: "console" }, resolution });
      if ("refused" in result) return refusedPage(frameOf(s, ""), 400, result.refused === "reason_required" ? "a reason is required" : "that action does not apply to this list");
      return listResultPage(frameOf(s, ""), kind, result);
    }), FORM);
}

const frameOf = (s: Session, title: string) => ({ title, operator: s.operator, csrf: s.csrf });

async function withPage(gate: Gate, request: Request, render: (s: Session) => Promise<Response>): Promise<Response> {
  const s = await gate(request);
  return s instanceof Response ? s : withSession(s, await render(s));
}

function withList(gate: Gate, request: Request, kind: string, render: (s: Session, kind: ListKind) => Promise<Response>): Promise<Response> {
  return withPage(gate, request, (s) => (isListKind(kind) ? render(s, kind) : Promise.resolve(refusedPage(frameOf(s, ""), 404, "no such list"))));
}

/** A POST from the console's own page: same origin and the session's CSRF token, else 403 before anything is read. */
async function withForm(gate: Gate, request: Request, body: unknown, handle: (s: Session, form: URLSearchParams) => Promise<Response>): Promise<Response> {
  const s = await gate(request);
  if (s instanceof Response) return s;
  const form = formBody(body);
  if (!sameOrigin(request) || !csrfMatches(request, form.get("csrf") ?? undefined)) return refusedPage(frameOf(s, ""), 403, "cross-site request refused: reload the page and try again");
  return handle(s, form);
}

async function signIn(check: OperatorCheck, request: Request, token: string | undefined): Promise<Response> {
  if (token === undefined) return signInPage("missing", 200);
  const verdict = await check(token);
  if (verdict.kind === "forbidden") return forbiddenPage();
  if (verdict.kind === "signed-out") return signInPage(verdict.why);
  const headers = new Headers({ location: "/console", "referrer-policy": "no-referrer", "cache-control": "no-store" });
  for (const c of signInCookies(request, token, verdict.expiresAt)) headers.append("set-cookie", c);
  return new Response(null, { status: 303, headers });
}

async function countsOf(ops: OpsContext): Promise<Record<ListKind, number>> {
  const counts = {} as Record<ListKind, number>;
  for (const kind of LIST_KINDS) counts[kind] = (await listNeeds(ops.sql, kind, {}, { limit: 1, offset: 0 })).total;
  return counts;
}
