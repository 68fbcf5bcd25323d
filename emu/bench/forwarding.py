"""`emu bench engine`: the engine's forwarding rate against a Linux bridge, same traffic, same run.

Traffic: iperf3 UDP with 64-byte datagrams from h0 to h1. The bridge gets
iperf3's unlimited rate (-b 0), which it forwards without loss, so its
figure is the sender's ceiling. The engine gets the same stream offered at
a sweep of rates up to that ceiling, and its figure is the highest rate h1
received: a flood far above an engine's capacity only measures how the
kernel spends CPU dropping frames at the socket (and starves iperf3's own
control connection), which RFC 2544-style throughput tests exclude for the
same reason. The engine's links are 1 Pb/s with no cable at D = 1, so only its
processing limits it. Medians over `repetitions` alternating runs.

`--web 1` measures the engine's sweep twice a repetition, in alternating order: with no live view, and
with the view's page open in headless Chromium on this machine (snapshots four times a second, each
one a Stats request to the worker): what watching a fabric costs its data plane, browser included.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from typing import Any

from emu.bench.lab import bmv2_pair, bridge_pair, engine_pair
from emu.dataplane.core import default_core
from emu.net.netns import Lab

SWEEP = (0.3, 0.5, 0.7, 0.85, 1.0)  # up to the sender's ceiling: the engine can at most match the bridge


def _iperf(lab: Lab, dst: str, seconds: float, size: int, pps: float = 0.0) -> tuple[float, float]:
    """(received packets per second, offered packets per second) at the receiver and the sender."""
    server = lab.popen(1, ["iperf3", "-s", "-1", "-J"], stdout=-1, stderr=-1, text=True)
    time.sleep(0.3)
    rate = str(int(pps * size * 8)) if pps else "0"
    try:
        lab.exec(0, ["iperf3", "-u", "-b", rate, "-l", str(size), "-t", str(seconds), "-c", dst, "-J"],
                 timeout=seconds + 20)
        out, _ = server.communicate(timeout=15)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    end = json.loads(out)["end"]["sum"]
    return (end["packets"] - end["lost_packets"]) / end["seconds"], end["packets"] / end["seconds"]


def _sweep(lab: Lab, seconds: float, size: int, ceiling: float) -> list[tuple[float, float]]:
    lab.exec(0, ["ping", "-c1", "-W2", "10.9.1.2"], check=False)
    return [(f, _iperf(lab, "10.9.1.2", seconds, size, f * ceiling)[0]) for f in SWEEP]


def _watched_sweep(lab: Lab, engine: Any, seconds: float, size: int, ceiling: float) -> tuple[list[tuple[float, float]], float]:
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
    engine_runs, bridge_runs, bmv2_runs, sweeps = [], [], [], []
    web_runs, web_rates, web_sweeps = [], [], []
    for rep in range(reps):
        with bridge_pair("b") as lab:
            bridge, _ = _iperf(lab, "10.9.0.3", seconds, size)
        bridge_runs.append(bridge)
        with engine_pair("e", rate_bps=1e15, delay_s=0.0, dilation=1.0) as (lab, engine):
            for watched in ((rep % 2 == 1, rep % 2 == 0) if web else (False,)):  # alternating first
                if watched:
                    wsweep, rate = _watched_sweep(lab, engine, seconds, size, bridge)
                    web_sweeps.append([{"offered_pps": round(f * bridge), "received_pps": round(r)} for f, r in wsweep])
                    web_runs.append(max(r for _, r in wsweep))
                    web_rates.append(rate)
                else:
                    sweep = _sweep(lab, seconds, size, bridge)
        sweeps.append([{"offered_pps": round(f * bridge), "received_pps": round(r)} for f, r in sweep])
        engine_runs.append(max(r for _, r in sweep))
        if backend == "bmv2":
            with bmv2_pair("p") as lab:
                lab.exec(0, ["ping", "-c1", "-W2", "10.9.1.2"], check=False)
                # BMv2 forwards tens of kpps: offered from a tenth of the bridge's rate up.
                bmv2_runs.append(max(_iperf(lab, "10.9.1.2", seconds, size, f * bridge / 10)[0] for f in SWEEP))
    e, b = statistics.median(engine_runs), statistics.median(bridge_runs)
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
        "sweeps": sweeps,
        "how": f"iperf3 UDP {size} B datagrams for {seconds:g} s; bridge at -b 0; engine offered "
               f"{', '.join(f'{f:g}' for f in SWEEP)} x the bridge's rate, best received rate kept; "
               f"median of {reps} alternating repetitions; engine: one worker, {default_core()} core, links 1 Pb/s, "
               "0 delay, D=1"
               + ("; BMv2: simple_switch running p4/fabric.p4 (log level warn), offered 0.02-0.07 x the "
                  "bridge's rate, best kept" if backend == "bmv2" else "") + how_web,
        "machine": f"{platform.machine()} Linux {platform.release()}, {os.cpu_count()} cores",
    }
