// Debian's headless Chromium, for tests that look at a page as a person's browser renders it.
// Started with the flags that keep it off the network on its own (no background traffic, no
// component updates) and a fresh profile, so the only requests are the page's own.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { runToExit } from "./processes.ts";

const DEBIAN_BINARY = "/usr/bin/chromium";
// Virtual time Chromium lets the page run (scripts, fetches of its assets) before it dumps the DOM.
const RENDER_BUDGET_MS = 20_000;

export function chromiumBinary(): string | undefined {
  return Bun.which("chromium") ?? Bun.which("chromium-browser") ?? (Bun.which(DEBIAN_BINARY) ? DEBIAN_BINARY : undefined);
}

/** The DOM of `url` once its scripts have run, as headless Chromium serialises it. */
export async function renderedDom(url: string): Promise<string> {
  const binary = chromiumBinary();
  if (!binary) throw new Error("chromium is not installed (apt-get install -y chromium; .ci/run installs it)");
  const profile = await mkdtemp(path.join(tmpdir(), "chromium-"));
  try {
    const flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
    const run = await runToExit([binary, ...flags, `--user-data-dir=${profile}`, `--virtual-time-budget=${RENDER_BUDGET_MS}`, "--dump-dom", url]);
    if (run.code !== 0) throw new Error(`chromium exited with ${run.code}: ${run.stderr.slice(-500)}`);
    return run.stdout;
  } finally {
    await rm(profile, { recursive: true, force: true });
  }
}
