// The replay page: every time series of a saved result as a small plot, one slider moving a cursor
// through them, and the result's counters as a table. Plain module, no build step.
const token = new URLSearchParams(location.search).get("token") || "";
const NS = "http://www.w3.org/2000/svg";
const W = 1000, H = 100;
const plots = [];

function el(kind, attrs, parent) {
  const e = document.createElementNS(NS, kind);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent.appendChild(e);
  return e;
}

function fmt(x) {
  return Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(4) : String(+x.toPrecision(6));
}

function timeBases(series) {
  // Series whose spans overlap share one time axis (one run's queue, rates and traces); series on
  // other bases (bins counted from 0, another run) get theirs. Returns the span each series is drawn on.
  const order = series.map((s, i) => [s.t[0], s.t[s.t.length - 1], i]).sort((a, b) => a[0] - b[0]);
  const span = new Array(series.length);
  let group = [], lo = 0, hi = -Infinity;
  const close = () => { for (const i of group) span[i] = [lo, hi > lo ? hi : lo + 1]; };
  for (const [a, b, i] of order) {
    if (group.length && a > hi) { close(); group = []; }
    if (!group.length) { lo = a; hi = b; } else hi = Math.max(hi, b);
    group.push(i);
  }
  close();
  return span;
}

function plot(s, [t0, t1]) {
  const box = document.createElement("div");
  box.className = "plot";
  box.dataset.series = s.name;
  const head = document.createElement("div");
  head.innerHTML = `<span class="name"></span><span class="at"></span>`;
  head.firstChild.textContent = s.name;
  box.append(head);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  box.append(svg);
  document.getElementById("plots").append(box);
  const vmin = Math.min(0, ...s.v), vmax = Math.max(...s.v) > vmin ? Math.max(...s.v) : vmin + 1;
  const x = (t) => (t - t0) / (t1 - t0) * W, y = (v) => H - 4 - (v - vmin) / (vmax - vmin) * (H - 8);
  el("polyline", { points: s.t.map((t, i) => `${x(t).toFixed(2)},${y(s.v[i]).toFixed(2)}`).join(" ") }, svg);
  const cursor = el("line", { class: "cursor", x1: W, x2: W, y1: 0, y2: H }, svg);
  plots.push({ s, t0, t1, x, cursor, at: head.lastChild });
}

function seek(fraction) {
  // The slider moves through each time base (timeBases): one time for the series of one base.
  for (const p of plots) {
    const t = p.t0 + fraction * (p.t1 - p.t0);
    let i = 0;
    while (i + 1 < p.s.t.length && p.s.t[i + 1] <= t) i++;
    p.cursor.setAttribute("x1", p.x(t));
    p.cursor.setAttribute("x2", p.x(t));
    p.at.textContent = t < p.s.t[0] ? `t ${fmt(t)}: not started` : `t ${fmt(t)}: ${fmt(p.s.v[i])}`;
  }
  document.getElementById("where").textContent = `${(fraction * 100).toFixed(1)} % of the run`;
  document.body.dataset.fraction = String(fraction);
}

function table(rows) {
  const tbody = document.getElementById("counters");
  const q = document.getElementById("filter").value.toLowerCase();
  tbody.replaceChildren();
  for (const [path, value] of rows) {
    if (q && !path.toLowerCase().includes(q)) continue;
    const tr = document.createElement("tr");
    for (const text of [path, typeof value === "number" ? fmt(value) : String(value)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    tbody.append(tr);
  }
}

const r = await (await fetch(`result.json?token=${encodeURIComponent(token)}`)).json();
document.getElementById("title").textContent = `${r.name}${r.scenario ? ` (scenario ${r.scenario})` : ""}: ` +
  `${r.series.length} series, ${r.counters.length} counters`;
document.getElementById("verdict").textContent = r.passed === true ? "passed" : r.passed === false ? "FAILED" : "";
const spans = timeBases(r.series);
r.series.forEach((s, i) => plot(s, spans[i]));
const slider = document.getElementById("slider");
slider.addEventListener("input", () => seek(slider.value / 1000));
document.getElementById("filter").addEventListener("input", () => table(r.counters));
table(r.counters);
seek(1);
document.body.dataset.ready = "1";
