"""`emu bench link`: does a link deliver the rate and round-trip time it was configured with?

h0 -- engine switch -- h1, every link at `rate` with `distance` of fibre, at
dilation D. With `--links engine` the switch is a Linux bridge and the
engine carries both links as wires, as it carries a BMv2 fabric's links. Rate: a paced UDP stream offered 10 % above line rate; h1 times
first to last arrival and counts wire bytes (frame + FCS, preamble and gap).
RTT: ping, median of `pings`, against 4 x (propagation + serialisation of
the echo frame), since the echo crosses the host link and the switch's
egress link each way. Both are compared in fabric units.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
from typing import Any

from emu.bench.lab import engine_pair, wired_pair
from emu.fidelity import fabric_fidelity
from emu.launch import child_env, python_module
from emu.units import WIRE_OVERHEAD_BYTES, parse_distance, parse_rate, parse_size, propagation_delay

PORT = 9100
UDP_HEADERS = 42


def run(params: dict[str, str], *, dilation: float) -> dict[str, Any]:
    rate = parse_rate(params.get("rate", "100G"))
    distance = parse_distance(params.get("distance", "1km"))
    nbytes = parse_size(params.get("bytes", "4MiB"))
    size = int(params.get("size", 1400))
    pings = int(params.get("pings", 20))
    delay = propagation_delay(distance)
    links = params.get("links", "native")
    if links not in ("native", "engine"):
        raise ValueError(f"link bench: measures an engine switch, or with --links engine the engine's wires; "
                         f"not {links!r}")
    pair, dst = (wired_pair, "10.9.0.3") if links == "engine" else (engine_pair, "10.9.1.2")
    env = child_env()
    with pair("l", rate_bps=rate, delay_s=delay, dilation=dilation) as (lab, engine):
        ping = lab.exec(0, ["ping", "-c", str(pings), "-i", "0.05", "-W", "5", dst], check=False).stdout
        rtts = [float(x) / 1e3 for x in re.findall(r"time=([\d.]+) ms", ping)]
        if len(rtts) < pings // 2:
            raise RuntimeError(f"link bench: only {len(rtts)} of {pings} pings came back:\n{ping}")
        py = python_module("emu.traffic.udp")
        rx = lab.popen(1, py + ["recv", str(PORT), "--expect", str(nbytes // size * size), "--idle", "2"],
                       stdout=subprocess.PIPE, text=True, env=env)
        assert rx.stdout is not None
        rx.stdout.readline()
        lab.exec(0, py + ["send", dst, str(PORT), "--bytes", str(nbytes), "--size", str(size),
                          "--rate", str(1.1 * rate / dilation)], timeout=600)
        got = json.loads(rx.communicate(timeout=120)[0])
        stats = engine.stats()
    frames = got["received_bytes"] // size
    wire = (size + UDP_HEADERS + WIRE_OVERHEAD_BYTES) * 8
    achieved = (frames - 1) * wire / got["wall_s"] * dilation if got["wall_s"] else 0.0
    echo_frame = max(98, 60) + WIRE_OVERHEAD_BYTES
    expected_rtt = 4 * (delay + echo_frame * 8 / rate)
    measured_rtt = statistics.median(rtts) / dilation
    return {
        "bench": "link",
        "switch": "Linux bridge, links carried by engine wires" if links == "engine" else "native engine",
        "dilation": dilation,
        "rate_bps": rate,
        "distance_m": distance,
        "achieved_bps": achieved,
        "rate_error": abs(achieved / rate - 1),
        "expected_rtt_s": expected_rtt,
        "measured_rtt_s": measured_rtt,
        "rtt_error": abs(measured_rtt / expected_rtt - 1),
        "frames": frames,
        "pings": len(rtts),
        "fidelity": fabric_fidelity(stats, rate_bps=rate, frame_bytes=size + UDP_HEADERS),
        "how": f"UDP {size} B at 1.1 x line rate, {nbytes} B, wire rate from first to last arrival; "
               f"median of {len(rtts)} pings vs 4 x (propagation + serialisation); fabric units at D={dilation:g}",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
