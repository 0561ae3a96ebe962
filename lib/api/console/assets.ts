// The console's two assets, served by the API itself (nothing is fetched from another origin,
// so the console works offline): the stylesheet, and the one script, which redraws the backlog
// chart every two seconds from /console/backlog.json. Everything else is plain HTML forms.

const CSS = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d232a; background: #fafbfc; }
nav { background: #1d3a5f; padding: .5em 1em; display: flex; gap: 1em; align-items: center; flex-wrap: wrap; }
nav a, nav .who { color: #fff; text-decoration: none; } nav .who { margin-left: auto; opacity: .8; }
main { padding: 0 1em 2em; max-width: 1200px; }
h1 { font-size: 1.3em; word-break: break-all; } h2 { font-size: 1.1em; margin-top: 1.5em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; }
th, td { border: 1px solid #d6dbe1; padding: .25em .5em; text-align: left; vertical-align: top; max-width: 28em; overflow-wrap: anywhere; }
th { background: #eef1f4; }
form.inline, form.action { display: inline-flex; gap: .3em; margin: .15em 0; align-items: center; flex-wrap: wrap; }
input, select, button { font: inherit; padding: .2em .4em; }
button { background: #1d3a5f; color: #fff; border: 0; border-radius: 3px; cursor: pointer; }
pre.answer { background: #f0f2f5; padding: .5em; white-space: pre-wrap; overflow-wrap: anywhere; }
article.key { border-left: 3px solid #9fb3c8; padding-left: .8em; margin: 1em 0; } article.parked { border-color: #c0392b; }
code.key-text { background: #f0f2f5; padding: 0 .3em; }
.empty { color: #6b7785; } .refused { color: #a61b1b; } .done { color: #17663a; }
.figures span { margin-right: 1.2em; } #backlog-chart { width: 100%; max-width: 600px; height: 160px; background: #fff; border: 1px solid #d6dbe1; }
#backlog-chart rect { fill: #5b8bd0; } #backlog-chart polyline { fill: none; stroke: #c0392b; stroke-width: 2; } #backlog-chart text { font-size: 10px; fill: #6b7785; }
.legend .bar-key, .legend .line-key { display: inline-block; width: 1em; height: .6em; background: #5b8bd0; } .legend .line-key { background: #c0392b; height: 2px; vertical-align: middle; }
ul.needs b { margin-left: .5em; } form.action + form.action { margin-left: .5em; }
`;

const JS = `"use strict";
(() => {
  const root = document.getElementById("backlog");
  const svg = document.getElementById("backlog-chart");
  if (!root || !svg) return;
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 160, PAD = 14, MAX_SAMPLES = 150;
  const pending = [];
  const set = (k, v) => { const el = root.querySelector('[data-k="' + k + '"]'); if (el) el.textContent = String(v); };
  const el = (name, attrs) => { const e = document.createElementNS(NS, name); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v)); return e; };
  function draw(perMinute) {
    svg.replaceChildren();
    const top = Math.max(1, ...perMinute.map((m) => m.count));
    const bw = W / perMinute.length;
    perMinute.forEach((m, i) => {
      const h = ((H - 2 * PAD) * m.count) / top;
      const bar = el("rect", { x: i * bw + 2, y: H - PAD - h, width: bw - 4, height: h });
      bar.appendChild(el("title", {})).textContent = m.minute.slice(11, 16) + " UTC: " + m.count + " published";
      svg.appendChild(bar);
    });
    svg.appendChild(el("text", { x: 2, y: 10 })).textContent = "max " + top + "/min";
    if (pending.length > 1) {
      const ptop = Math.max(1, ...pending);
      const step = W / (MAX_SAMPLES - 1);
      const points = pending.map((p, i) => (i * step).toFixed(1) + "," + (H - PAD - ((H - 2 * PAD) * p) / ptop).toFixed(1)).join(" ");
      svg.appendChild(el("polyline", { points }));
      svg.appendChild(el("text", { x: W - 90, y: 10 })).textContent = "pending max " + ptop;
    }
  }
  async function tick() {
    try {
      const res = await fetch(root.dataset.src, { credentials: "same-origin", headers: { accept: "application/json" } });
      if (!res.ok) { root.dataset.state = "http " + res.status; return; }
      const b = await res.json();
      pending.push(b.pending);
      if (pending.length > MAX_SAMPLES) pending.shift();
      set("pending", b.pending);
      set("oldestPendingAgeSeconds", b.oldestPendingAgeSeconds.toFixed(1));
      set("parked", b.parked);
      set("held", b.held);
      set("lastMinute", b.publishedPerMinute.length ? b.publishedPerMinute[b.publishedPerMinute.length - 1].count : 0);
      draw(b.publishedPerMinute);
      root.dataset.state = "live";
      root.dataset.updated = b.at;
    } catch (e) {
      root.dataset.state = "unreachable";
    }
  }
  tick();
  setInterval(tick, 2000);
})();
`;

const STATIC_HEADERS = { "x-content-type-options": "nosniff", "cache-control": "no-cache" };

/** Path → answer; the assets hold no data, so they are served before sign-in (its page uses the stylesheet). */
export function consoleAssets(): ReadonlyMap<string, () => Response> {
  return new Map([
    ["/console/assets/console.css", () => new Response(CSS, { headers: { ...STATIC_HEADERS, "content-type": "text/css; charset=utf-8" } })],
    ["/console/assets/console.js", () => new Response(JS, { headers: { ...STATIC_HEADERS, "content-type": "text/javascript; charset=utf-8" } })],
  ]);
}
