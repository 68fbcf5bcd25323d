"""`emu bench engine`: the engine's forwarding rate against a Linux bridge, same traffic, same run.

Traffic: iperf3 UDP with 64-byte datagrams from h0 to h1. The bridge gets
iperf3's unlimited rate (-b 0), which it forwards without loss, so its
figure is the sender's ceiling. The engine gets the same stream offered at
a sweep of rates around that ceiling, then the bridge's own (unpaced), and its
figure is the highest rate it delivered to h1: the paced rates, because a flood
far above an engine's capacity only measures how the kernel spends CPU dropping
frames at the socket (and starves iperf3's own control connection), which RFC
2544-style throughput tests exclude for the same reason; the unpaced one,
because it is the bridge's traffic, and a paced sender spends more CPU a
datagram than an unpaced one (its timers and select), CPU the engine's worker
and the receiver share with it. The engine's links are 1 Pb/s with no cable at
D = 1, so only its processing limits it. Medians over `repetitions` alternating
runs.

What a switch forwarded is counted where it leaves the switch: frames arriving at h1's interface (its
kernel's counter), for the bridge, the engine and BMv2 alike, as RFC 2544 counts a device's output. What
iperf3 itself received is reported beside it (`*_app_pps`): on two cores the sender, the engine's worker
and the receiver share them, and a receiver waiting for a core loses datagrams at its own socket
(UdpRcvbufErrors) that the switch did deliver; that loss is the test's receiver, not the switch.

`--web 1` measures the engine's sweep twice a repetition, in alternating order: with no live view, and
with the view's page open in headless Chromium on this machine (snapshots four times a second, each
one a Stats request to the worker): what watching a fabric costs its data plane, browser included.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from emu.bench.lab import bmv2_pair, bridge_pair, engine_pair
from emu.dataplane.core import default_core
from emu.net.netns import Lab

# Paced around the sender's ceiling with the bridge (its own path is shorter here), then unpaced (None): the
# bridge's own traffic, iperf3 -b 0.
SWEEP: tuple[float | None, ...] = (0.3, 0.5, 0.7, 0.85, 1.0, 1.15, None)


@dataclass
class Rates:
    """One iperf3 run's packets a second: what the sender sent, what arrived at the receiver's interface
    (what the switch delivered), and what iperf3 received there."""

    sent: float
    delivered: float
    received: float


def _frames_in(lab: Lab, i: int) -> int:
    """Frames host i's eth0 has received (its kernel's counter, /proc/net/dev inside its namespace)."""
    out = lab.exec(i, ["cat", "/proc/net/dev"]).stdout
    line = next(x for x in out.splitlines() if x.strip().startswith("eth0:"))
    return int(line.split(":", 1)[1].split()[1])


IPERF_PORT = 5201  # iperf3's default


def _wait_listening(server: subprocess.Popen, port: int, timeout_s: float = 10.0) -> None:
    """Until `server` (nsenter exec'd into the server: the same pid) listens on `port` inside its
    namespace: read from its own /proc/PID/net tables, so no process is started to ask. A fixed pause
    was a guess too long on a fast machine and too short on a slow one."""
    me = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout_s
    want = f":{port:04X}"
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"bench engine: iperf3 -s ended before it listened (exit {server.returncode})")
        try:
            if os.readlink(f"/proc/{server.pid}/ns/net") != me:  # entered the host's namespace
                for table in ("tcp6", "tcp"):
                    with open(f"/proc/{server.pid}/net/{table}") as f:
                        if any(row.split()[1].endswith(want) and row.split()[3] == "0A" for row in list(f)[1:]):
                            return
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"bench engine: iperf3 -s did not listen on port {port} within {timeout_s:g} s")


def _iperf(lab: Lab, dst: str, seconds: float, size: int, pps: float = 0.0) -> Rates:
    """One run from h0 to h1 at `pps` (0: as fast as iperf3 sends)."""
    server = lab.popen(1, ["iperf3", "-s", "-1", "-J"], stdout=-1, stderr=-1, text=True)
    _wait_listening(server, IPERF_PORT)
    rate = str(int(pps * size * 8)) if pps else "0"
    before = _frames_in(lab, 1)
    try:
        lab.exec(0, ["iperf3", "-u", "-b", rate, "-l", str(size), "-t", str(seconds), "-c", dst, "-J"],
                 timeout=seconds + 20)
        out, _ = server.communicate(timeout=15)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    end = json.loads(out)["end"]["sum"]
    s = end["seconds"]  # the stream's own span; the counter also saw its few control frames
    return Rates(end["packets"] / s, (_frames_in(lab, 1) - before) / s, (end["packets"] - end["lost_packets"]) / s)


def _sweep(lab: Lab, seconds: float, size: int, ceiling: float) -> list[tuple[float | None, Rates]]:
    lab.exec(0, ["ping", "-c1", "-W2", "10.9.1.2"], check=False)
    return [(f, _iperf(lab, "10.9.1.2", seconds, size, f * ceiling if f is not None else 0.0)) for f in SWEEP]


def _rows(sweep: list[tuple[float | None, Rates]], ceiling: float) -> list[dict[str, int | None]]:
    """offered_pps None: unpaced (-b 0), as the bridge is measured."""
    return [{"offered_pps": round(f * ceiling) if f is not None else None, "sent_pps": round(r.sent),
             "delivered_pps": round(r.delivered), "received_pps": round(r.received)} for f, r in sweep]


def _watched_sweep(lab: Lab, engine: Any, seconds: float, size: int, ceiling: float
                   ) -> tuple[list[tuple[float | None, Rates]], float]:
    """The sweep with the live view's page open in headless Chromium; and the snapshots it got a second."""
    from emu.web.app import WebView, make_app
    from emu.web.chromium import HeadlessPage
    from emu.web.scene import topology_of_spec

    topo = topology_of_spec(engine.spec)
    view = WebView(lambda token: make_app(topo, engine.stats, token))
    try:
        with HeadlessPage(view.url):
            deadline = time.monotonic() + 60
            while view.app.state.snapshots < 2:  # the page is drawn and its websocket runs
                if time.monotonic() > deadline:
                    raise RuntimeError("bench engine --web: the page in chromium took no snapshot in 60 s")
                time.sleep(0.1)
            n0, t0 = view.app.state.snapshots, time.monotonic()
            sweep = _sweep(lab, seconds, size, ceiling)
            rate = (view.app.state.snapshots - n0) / (time.monotonic() - t0)
    finally:
        view.close()
    return sweep, rate


def run(params: dict[str, str], backend: str = "native") -> dict[str, Any]:
    """`backend` bmv2: BMv2's simple_switch (p4/fabric.p4) is measured too, same traffic, same run."""
    seconds = float(params.get("seconds", 2))
    if seconds < 1 or seconds != int(seconds):  # iperf3 -t counts whole seconds (0.5 ran on and on)
        raise ValueError(f"bench engine: --seconds is a whole number of seconds >= 1, got {params['seconds']!r}")
    reps = int(params.get("repetitions", 3))
    size = int(params.get("size", 64))
    web = params.get("web", "0") not in ("0", "")
    engine_runs, engine_app, bridge_runs, bridge_app, bmv2_runs, sweeps = [], [], [], [], [], []
    web_runs, web_rates, web_sweeps = [], [], []
    for rep in range(reps):
        with bridge_pair("b") as lab:
            bridge = _iperf(lab, "10.9.0.3", seconds, size)
        bridge_runs.append(bridge.delivered)
        bridge_app.append(bridge.received)
        ceiling = bridge.sent
        with engine_pair("e", rate_bps=1e15, delay_s=0.0, dilation=1.0) as (lab, engine):
            for watched in ((rep % 2 == 1, rep % 2 == 0) if web else (False,)):  # alternating first
                if watched:
                    wsweep, rate = _watched_sweep(lab, engine, seconds, size, ceiling)
                    web_sweeps.append(_rows(wsweep, ceiling))
                    web_runs.append(max(r.delivered for _, r in wsweep))
                    web_rates.append(rate)
                else:
                    sweep = _sweep(lab, seconds, size, ceiling)
        sweeps.append(_rows(sweep, ceiling))
        engine_runs.append(max(r.delivered for _, r in sweep))
        engine_app.append(max(r.received for _, r in sweep))
        if backend == "bmv2":
            with bmv2_pair("p") as lab:
                lab.exec(0, ["ping", "-c1", "-W2", "10.9.1.2"], check=False)
                # BMv2 forwards tens of kpps: offered from a tenth of the bridge's rate up.
                bmv2_runs.append(max(_iperf(lab, "10.9.1.2", seconds, size, f * ceiling / 10).delivered
                                     for f in SWEEP if f is not None))
    e, b = statistics.median(engine_runs), statistics.median(bridge_runs)
    ea, ba = statistics.median(engine_app), statistics.median(bridge_app)
    extra: dict[str, Any] = {}
    if web_runs:
        w = statistics.median(web_runs)
        extra = {"engine_web_pps": round(w), "web_cost": round(1 - w / e, 3) if e else 0.0,
                 "engine_web_runs_pps": [round(x) for x in web_runs], "web_sweeps": web_sweeps,
                 "web_snapshots_per_s": round(statistics.median(web_rates), 2)}
    if bmv2_runs:
        m = statistics.median(bmv2_runs)
        extra |= {"bmv2_pps": round(m), "bmv2_ratio": round(m / b, 3) if b else 0.0,
                 "engine_over_bmv2": round(e / m, 2) if m else 0.0, "bmv2_runs_pps": [round(x) for x in bmv2_runs]}
    how_web = ("; --web: the same sweep again with the live view's page open in headless Chromium on this "
               "machine (its snapshots a Stats request each), the two in alternating order") if web_runs else ""
    return {**extra,
        "bench": "engine",
        "engine_pps": round(e),
        "bridge_pps": round(b),
        "ratio": round(e / b, 3) if b else 0.0,
        "engine_runs_pps": [round(x) for x in engine_runs],
        "bridge_runs_pps": [round(x) for x in bridge_runs],
        # What iperf3 itself received (the switch's delivery less the receiver's own socket losses).
        "engine_app_pps": round(ea),
        "bridge_app_pps": round(ba),
        "app_ratio": round(ea / ba, 3) if ba else 0.0,
        "sweeps": sweeps,
        "how": f"iperf3 UDP {size} B datagrams for {seconds:g} s; bridge at -b 0; engine offered "
               f"{', '.join(f'{f:g}' for f in SWEEP if f is not None)} x what the sender sent through the bridge, "
               "then unpaced (-b 0, as the bridge), best kept; "
               "a rate is frames arriving at h1's interface a second (what the switch delivered; iperf3's own "
               "count beside it, *_app_pps); "
               f"median of {reps} alternating repetitions; engine: one worker, {default_core()} core, links 1 Pb/s, "
               "0 delay, D=1"
               + ("; BMv2: simple_switch running p4/fabric.p4 (log level warn), offered 0.02-0.07 x the "
                  "bridge's rate, best kept" if backend == "bmv2" else "") + how_web,
        "machine": f"{platform.machine()} Linux {platform.release()}, {os.cpu_count()} cores",
    }
