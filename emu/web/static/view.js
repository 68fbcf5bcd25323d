// The live view: draws the topology once (SVG, one line per link, one mark per node), then colours it
// from each snapshot the server sends over the websocket, or (a recording, `emu view`) from the
// recorded snapshot a slider picks. Plain module, no build step.
const token = new URLSearchParams(location.search).get("token") || "";
const svg = document.getElementById("fabric");
const NS = "http://www.w3.org/2000/svg";
const W = 1000, H = 600;
const links = new Map();   // link id -> {ab, ba, meta}
const nodes = new Map();   // node name -> {x, y, el}
const queues = new Map();  // "switch:port" -> rect
let ports = {};
let control = false;  // the server was started with --web-control: the page may fail and restore
let planeOf = {};     // switch -> plane (the topology's groups)
const KEEP = 120;     // snapshots the panels keep: 30 s at four a second
const JUMP_MS = 100;  // fabric ms between two snapshots that is a jump, not a run
// The panels' data, one point a snapshot (fabric ms): what the page draws, readable by a test.
window.series = { t: [], planes: {}, queue: [], pfc: [], ecn: [], trims: [] };

function el(kind, attrs, parent = svg) {
  const e = document.createElementNS(NS, kind);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent.appendChild(e);
  return e;
}

function colour(util) {
  if (util === null || util === undefined) return "#ccc";
  const u = Math.max(0, Math.min(1, util));
  return `hsl(${120 - 120 * u}, 70%, 42%)`;  // green (idle) to red (line rate)
}

function describe(key) {
  const p = ports[key];
  if (!p) return key;
  const q = p.queue_bytes.map((b, i) => b ? `q${i} ${b} B` : "").filter(Boolean).join(" ");
  const drops = Object.entries(p.drops).map(([r, n]) => `${r} ${n}`).join(" ");
  const paused = p.paused_s.map((t, i) => t ? `p${i} ${(t * 1e6).toFixed(1)} us` : "").filter(Boolean).join(" ");
  return `${key}  ${p.up ? "up" : "DOWN"}  ${q || "queues empty"}  pfc sent ${p.pfc_tx} received ${p.pfc_rx}` +
         `  paused ${paused || "never"}` +
         `  ecn ${p.ecn_marked}  trimmed ${p.trimmed}  drops ${drops || "none"}` +
         (p.degraded ? `  degraded ${JSON.stringify(p.degraded)}` : "");
}

async function act(verb, target) {
  const r = await fetch(`control?token=${encodeURIComponent(token)}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ verb, ...target }) });
  const said = await r.json();
  document.getElementById("said").textContent = r.ok ? `${verb} ${JSON.stringify(target)}: done` : `refused: ${said.error}`;
}

function offer(target, label) {
  // Fail and restore buttons for what was clicked (only with --web-control).
  if (!control) return;
  const box = document.getElementById("actions");
  box.replaceChildren(`${label}: `);
  for (const verb of ["fail", "restore"]) {
    const b = document.createElement("button");
    b.textContent = verb;
    b.dataset.verb = verb;
    b.onclick = () => act(verb, target);
    box.append(b, " ");
  }
}

let topo = null;          // the whole topology, as served
let topoLinks = new Map(); // link id -> its meta (every link, drawn or not)
let expanded = null;       // a large fabric: the group (plane, region) opened, or null (all collapsed)
const GROUP_OVER = 60;     // nodes above which the fabric is drawn a node per group (FPF 64 x 8, Tahan next)

async function draw() {
  topo = await (await fetch(`topology.json?token=${encodeURIComponent(token)}`)).json();
  control = Boolean(topo.control);
  if (control) {
    const planes = [...new Set(Object.values(topo.planes))].sort((a, b) => a - b);
    const header = document.getElementById("planes");
    for (const p of planes) {
      const b = document.createElement("button");
      b.textContent = `plane ${p}`;
      b.dataset.plane = p;
      b.onclick = () => offer({ plane: p }, `plane ${p}`);
      header.append(b, " ");
    }
  }
  planeOf = topo.planes || {};
  for (const l of topo.links) topoLinks.set(l.id, l);
  render();
}

function groupOf(name) {
  // A switch's group, or "h" for a host.
  return name in planeOf ? planeOf[name] : "h";
}

function render() {
  // The drawing for the current view: every node and link of a small fabric; of a large one, a node per
  // group and one for the hosts, links between them summed (click a group to open it), or one group
  // opened: its switches across the whole width, the hosts, and their links.
  svg.replaceChildren();
  nodes.clear(); links.clear(); queues.clear();
  const defs = el("defs", {});
  const arrow = el("marker", { id: "pause-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 5,
                               markerHeight: 5, orient: "auto-start-reverse" }, defs);
  el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#f90" }, arrow);
  const grouped = topo.nodes.length > GROUP_OVER;
  const groups = [...new Set(topo.nodes.filter((n) => n.kind === "switch").map((n) => n.group))].sort((a, b) => a - b);
  const band = 1 / Math.max(1, groups.length);
  // Where each node of the topology is drawn: itself, or the group node standing for it (null: not drawn).
  const shownAs = new Map();
  for (const n of topo.nodes) {
    if (!grouped) {
      nodes.set(n.name, { ...n, x: n.x * W, y: n.y * H });
      shownAs.set(n.name, n.name);
    } else if (expanded === null) {
      const key = n.kind === "host" ? "hosts" : `group ${n.group}`;
      if (!nodes.has(key)) {
        nodes.set(key, n.kind === "host"
          ? { name: "hosts", kind: "hosts", x: W / 2, y: 0.95 * H }
          : { name: key, kind: "group", group: n.group, x: (groups.indexOf(n.group) + 0.5) * band * W, y: 0.45 * H });
      }
      shownAs.set(n.name, key);
    } else if (n.kind === "host" || n.group === expanded) {
      const lo = groups.indexOf(expanded) * band;  // the group's band, spread over the whole width
      nodes.set(n.name, { ...n, x: (n.kind === "host" ? n.x : (n.x - lo) / band) * W, y: n.y * H });
      shownAs.set(n.name, n.name);
    } else {
      shownAs.set(n.name, null);
    }
  }
  // Links: each drawn link is the sum of its members (one, unless grouped), each member's direction
  // as drawn (flip: its b->a is the drawn a->b).
  const drawn = new Map();
  for (const l of topo.links) {
    const a = shownAs.get(l.a), b = shownAs.get(l.b);
    if (!a || !b || a === b) continue;
    const key = grouped && expanded === null ? [a, b].sort().join("|") : String(l.id);
    if (!drawn.has(key)) drawn.set(key, { key, a, b, members: [], meta: grouped && expanded === null ? null : l });
    drawn.get(key).members.push({ id: l.id, flip: a !== drawn.get(key).a, rate: l.rate_bps });
  }
  const g = el("g", { id: "links" });
  const bent = new Map();  // parallel links in one row, each bent further
  for (const d of drawn.values()) {
    const a = nodes.get(d.a), b = nodes.get(d.b), l = d.meta;
    const mx = (a.x + b.x) / 2;
    let my = (a.y + b.y) / 2;
    if (Math.abs(a.y - b.y) < 1) {  // a link within one row (BAG's long haul, a ring): bent, so that it
      const bend = Math.abs(b.x - a.x) * 0.1 * (1 + 0.3 * (bent.get(`${d.a}|${d.b}`) || 0));  // passes no node
      bent.set(`${d.a}|${d.b}`, (bent.get(`${d.a}|${d.b}`) || 0) + 1);
      my += a.y < H / 2 ? bend : -bend;
    }
    // Two halves: a to the middle is a->b, the middle to b is b->a (each direction its own colour).
    const attrs = l ? { "data-link": l.id } : { "data-group-link": d.key, "data-members": d.members.length };
    const ab = el("line", { x1: a.x, y1: a.y, x2: mx, y2: my, class: "link", ...attrs }, g);
    const ba = el("line", { x1: mx, y1: my, x2: b.x, y2: b.y, class: "link", ...attrs }, g);
    for (const half of [ab, ba]) {
      if (l) {
        half.addEventListener("click", () => {
          pin([l.a_port && `${l.a}:${l.a_port}`, l.b_port && `${l.b}:${l.b_port}`].filter(Boolean), `link ${l.a} - ${l.b}`);
          offer({ link: [l.a, l.b] }, `link ${l.a} - ${l.b}`);
        });
        half.addEventListener("mouseenter", () => {
          document.getElementById("port").textContent =
            [l.a_port && `${l.a}:${l.a_port}`, l.b_port && `${l.b}:${l.b_port}`].filter(Boolean).map(describe).join("\n");
        });
      } else {
        half.addEventListener("mouseenter", () => {
          document.getElementById("port").textContent = `${d.a} - ${d.b}: ${d.members.length} links, summed`;
        });
      }
    }
    links.set(d.key, { ab, ba, meta: l, members: d.members });
    if (l && l.delay_s >= 10e-6) {  // a long-haul link (2 km of fibre or more): its length, at 5 us a km
      el("text", { x: mx, y: my - 4, "text-anchor": "middle", class: "length" }, g).textContent =
        `${(l.delay_s / 5e-6).toFixed(0)} km`;
    }
    if (!l) continue;
    for (const [end, port] of [[a, l.a_port], [b, l.b_port]]) {
      if (!port) continue;
      const other = end === a ? b : a;
      const qx = end.x + (other.x - end.x) * 0.12, qy = end.y + (other.y - end.y) * 0.12;
      const key = `${end.name}:${port}`;
      const rect = el("rect", { x: qx - 2, y: qy, width: 4, height: 0, class: "queue", "data-port": key }, g);
      rect.addEventListener("mouseenter", () => { document.getElementById("port").textContent = describe(key); });
      rect.addEventListener("click", () => pin([key], `port ${key}`));
      queues.set(key, rect);
    }
  }
  const many = [...nodes.values()].filter((n) => n.kind === "host").length > 32;  // names too close to read
  for (const n of nodes.values()) {
    if (n.kind === "group" || n.kind === "hosts") {
      n.el = el("rect", { x: n.x - 30, y: n.y - 10, width: 60, height: 20, class: `node ${n.kind === "group" ? "switch" : "host"}`,
                          "data-group": n.kind === "group" ? n.group : "hosts" });
      const count = topo.nodes.filter((m) => (n.kind === "group" ? m.kind === "switch" && m.group === n.group : m.kind === "host")).length;
      el("text", { x: n.x, y: n.y - 13, "text-anchor": "middle" }).textContent =
        n.kind === "group" ? `${n.name} (${count} switches): click to open` : `${count} hosts`;
      if (n.kind === "group") n.el.addEventListener("click", () => { expanded = n.group; render(); });
      continue;
    }
    n.el = el(n.kind === "switch" ? "rect" : "circle", n.kind === "switch"
      ? { x: n.x - 9, y: n.y - 6, width: 18, height: 12, class: "node switch", "data-node": n.name }
      : { cx: n.x, cy: n.y, r: many ? 3 : 5, class: "node host", "data-node": n.name });
    if (n.kind === "switch") {
      n.el.addEventListener("click", () => {
        pin(Object.keys(ports).filter((k) => k.startsWith(`${n.name}:`)).sort(), `switch ${n.name}`);
        offer({ switch: n.name }, `switch ${n.name}`);
      });
      n.el.addEventListener("mouseenter", () => {
        document.getElementById("port").textContent =
          Object.keys(ports).filter((k) => k.startsWith(`${n.name}:`)).sort().map(describe).join("\n");
      });
    }
    if (n.kind === "switch" || !many) {
      el("text", { x: n.x, y: n.y + (n.kind === "switch" ? -9 : 14), "text-anchor": "middle" }).textContent = n.name;
    }
  }
  const back = document.getElementById("back");
  back.hidden = !(grouped && expanded !== null);
  back.textContent = `group ${expanded}: back to all groups`;
  back.onclick = () => { expanded = null; render(); };
  if (last) paint(last);
}

let last = null;  // the latest snapshot: a new drawing is coloured at once
let pinned = null;  // what a click pinned: its ports' figures stay on screen, refreshed each snapshot

function pin(keys, label) {
  pinned = { keys, label };
  showPinned();
}

function showPinned() {
  if (!pinned) return;
  document.getElementById("pinned").textContent =
    `${pinned.label} (clicked; click another to change)\n` + pinned.keys.map(describe).join("\n");
}

function update(s) {
  if (s.ended) {
    document.getElementById("clock").textContent = "the fabric stopped";
    document.getElementById("fidelity").textContent = s.ended;
    return;
  }
  ports = s.ports;
  last = s;
  document.getElementById("clock").textContent = `fabric time ${(s.fabric_s * 1e3).toFixed(3)} ms`;
  document.getElementById("fidelity").textContent = s.fidelity;
  document.getElementById("job").textContent = (s.jobs || []).length
    ? s.jobs.map((j) => `${j.what}, ${(j.fabric_s * 1e6).toFixed(1)} us in`).join("; ") : "no job running";
  paint(s);
  record(s);
  showPinned();
  document.body.dataset.snapshots = String(Number(document.body.dataset.snapshots || 0) + 1);
}

function paint(s) {
  // The drawing's colours, arrows and queue bars from a snapshot.
  const byId = new Map(s.links.map((l) => [l.id, l]));
  for (const drawn of links.values()) {
    // A drawn link's load is its members', weighted by their rates; it is down when every member is.
    let ab = 0, ba = 0, rate = 0, counted = false, up = false;
    for (const m of drawn.members) {
      const l = byId.get(m.id);
      if (!l) continue;
      up = up || l.up;
      const [x, y] = m.flip ? [l.ba, l.ab] : [l.ab, l.ba];
      if (x === null || x === undefined || y === null || y === undefined) continue;
      ab += x * m.rate; ba += y * m.rate; rate += m.rate; counted = true;
    }
    drawn.ab.setAttribute("stroke", colour(counted ? ab / rate : null));
    drawn.ba.setAttribute("stroke", colour(counted ? ba / rate : null));
    drawn.ab.classList.toggle("down", !up);
    drawn.ba.classList.toggle("down", !up);
    if (!drawn.meta) continue;
    // The pause tree as it forms (congestion-spreading's plot draws it after the fact): an arrow from the
    // pausing end of a link to the end it holds. A switch end is held when its port's transmitter was; a
    // host end when its NIC model (at the switch's port) was.
    const m = drawn.meta;
    const held = (node, port, other, otherPort) => port
      ? Boolean(s.ports[`${node}:${port}`]?.pausing.some(Boolean))
      : Boolean(s.ports[`${other}:${otherPort}`]?.host_pausing?.some(Boolean));
    drawn.ab.classList.toggle("pauses-a", held(m.a, m.a_port, m.b, m.b_port));
    drawn.ba.classList.toggle("pauses-b", held(m.b, m.b_port, m.a, m.a_port));
  }
  for (const [key, p] of Object.entries(s.ports)) {
    const rect = queues.get(key);
    if (!rect) continue;
    const bytes = p.queue_bytes.reduce((a, b) => a + b, 0);
    rect.setAttribute("height", Math.min(40, 40 * Math.log10(1 + bytes / 1000) / 3));  // log scale: 1 MB is full
    rect.setAttribute("data-bytes", bytes);
    rect.classList.toggle("pausing", p.pausing.some(Boolean));
  }
}

function record(s) {
  // Per plane, what its switches sent to hosts (the switch-to-host direction of each host link), in Gb/s.
  const sent = {};
  for (const l of s.links) {
    const m = topoLinks.get(l.id);
    if (!m) continue;
    const aHost = !m.a_port, bHost = !m.b_port;
    if (aHost === bHost) continue;  // switch to switch
    const sw = aHost ? m.b : m.a, util = aHost ? l.ba : l.ab;  // the direction towards the host
    const plane = planeOf[sw] ?? 0;
    sent[plane] = (sent[plane] || 0) + (util || 0) * m.rate_bps / 1e9;
  }
  let deepest = 0, pausing = 0, ecn = 0, trims = 0;
  for (const p of Object.values(s.ports)) {
    deepest = Math.max(deepest, p.queue_bytes.reduce((a, b) => a + b, 0));
    ecn += p.ecn_marked || 0;
    trims += p.trimmed || 0;
    if (p.pausing.some(Boolean)) pausing += 1;  // a switch port held by its peer
    if ((p.host_pausing || []).some(Boolean)) pausing += 1;  // a host's NIC held by its switch
  }
  const S = window.series;
  if (S.t.length && s.fabric_s * 1e3 - S.t[S.t.length - 1] > JUMP_MS) {
    // A job began at the next whole fabric second (the fabric clock's way): start the panels afresh
    // rather than draw a second of nothing.
    S.t = []; S.queue = []; S.pfc = []; S.planes = {}; S.ecn = []; S.trims = []; S.marks = undefined;
  }
  // ECN marks and trims since the last snapshot, over every port (the counters only grow).
  const before = S.marks || [ecn, trims];
  S.marks = [ecn, trims];
  S.t.push(s.fabric_s * 1e3);
  for (const plane of new Set([...Object.keys(S.planes), ...Object.keys(sent)])) {
    S.planes[plane] = S.planes[plane] || S.t.slice(0, -1).map(() => 0);
    S.planes[plane].push(sent[plane] || 0);
  }
  S.queue.push(deepest / 1e3);
  S.pfc.push(pausing);
  S.ecn.push(Math.max(0, ecn - before[0]));
  S.trims.push(Math.max(0, trims - before[1]));
  if (S.t.length > KEEP) {
    S.t.shift(); S.queue.shift(); S.pfc.shift(); S.ecn.shift(); S.trims.shift();
    for (const v of Object.values(S.planes)) v.shift();
  }
  plot("panel-planes", Object.entries(S.planes).map(([p, v], i) => ({ name: `plane ${p}`, v, colour: PALETTE[i % PALETTE.length] })));
  plot("panel-queue", [{ name: "deepest", v: S.queue, colour: "#d33" }]);
  plot("panel-pfc", [{ name: "pausing", v: S.pfc, colour: "#f90" }]);
  plot("panel-marks", [{ name: "ECN", v: S.ecn, colour: "#2ca02c" }, { name: "trims", v: S.trims, colour: "#9467bd" }]);
}

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"];

function plot(id, lines) {
  // One panel: its title, a y scale from 0 to the largest value, the fabric-time axis, a line per series
  // with its name at its end (the legend is the line's own label, never over the data).
  const box = document.getElementById(id);
  const w = box.clientWidth || 300, h = box.clientHeight || 120, left = 34, bottom = 16, top = 14, right = 46;
  const t = window.series.t;
  const ymax = Math.max(1e-9, ...lines.flatMap((l) => l.v));
  const x = (i) => left + (t.length > 1 ? (t[i] - t[0]) / Math.max(1e-12, t[t.length - 1] - t[0]) : 0) * (w - left - right);
  const y = (v) => top + (1 - v / ymax) * (h - top - bottom);
  box.replaceChildren();
  const g = (kind, attrs, text) => { const e = el(kind, attrs, box); if (text !== undefined) e.textContent = text; return e; };
  g("text", { x: 4, y: 10 }, box.dataset.title);
  g("line", { x1: left, y1: top, x2: left, y2: h - bottom, class: "axis" });
  g("line", { x1: left, y1: h - bottom, x2: w - right, y2: h - bottom, class: "axis" });
  g("text", { x: left - 3, y: top + 8, "text-anchor": "end" },
    ymax < 1e-6 ? "" : ymax >= 100 ? ymax.toFixed(0) : ymax.toPrecision(2));
  g("text", { x: left - 3, y: h - bottom, "text-anchor": "end" }, "0");
  if (t.length) {
    g("text", { x: left, y: h - 4 }, `${t[0].toFixed(3)} ms`);
    g("text", { x: w - right, y: h - 4, "text-anchor": "end" }, `${t[t.length - 1].toFixed(3)} ms fabric`);
  }
  for (const l of lines) {
    if (!l.v.length) continue;
    g("polyline", { points: l.v.map((v, i) => `${x(i)},${y(v)}`).join(" "), fill: "none", stroke: l.colour,
                    "stroke-width": 1.5, "data-series": l.name });
    g("text", { x: w - right + 3, y: y(l.v[l.v.length - 1]) + 3, fill: l.colour }, l.name);
  }
}

async function replay() {
  // A recording (`emu up --record`, served by `emu view`): the same drawing and panels, a slider over its
  // snapshots; at snapshot i the panels hold the KEEP snapshots up to i, as the live page had them then.
  const snaps = await (await fetch(`recording.json?token=${encodeURIComponent(token)}`)).json();
  const slider = document.createElement("input");
  Object.assign(slider, { type: "range", id: "slider", min: 0, max: Math.max(0, snaps.length - 1) });
  slider.value = slider.max;
  document.getElementById("planes").replaceChildren(`recording ${topo.recorded}: `, slider);
  const show = (i) => {
    window.series = { t: [], planes: {}, queue: [], pfc: [], ecn: [], trims: [] };
    document.body.dataset.snapshots = "0";
    for (let k = Math.max(0, i - KEEP + 1); k <= i; k++) update(snaps[k]);
    document.getElementById("clock").textContent =
      `fabric time ${(snaps[i].fabric_s * 1e3).toFixed(3)} ms (snapshot ${i + 1} of ${snaps.length}, recorded)`;
  };
  slider.addEventListener("input", () => show(Number(slider.value)));
  if (snaps.length) show(snaps.length - 1);
  else document.getElementById("clock").textContent = "the recording holds no snapshot";
  document.body.dataset.ready = "1";
}

await draw();
if (topo.recorded) {
  await replay();
} else {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws?token=${encodeURIComponent(token)}`);
  ws.onmessage = (ev) => update(JSON.parse(ev.data));
  ws.onclose = () => {
    const clock = document.getElementById("clock");
    if (clock.textContent !== "the fabric stopped") clock.textContent = "disconnected";
  };
}
