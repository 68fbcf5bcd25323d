"""`emu bench roce`: how many packets per second one MetaRoCE endpoint process moves.

The endpoints are the emulator's slowest part (Python, one syscall per
packet), and their packet rate sets the dilation a RoCE run needs. Measured
without the engine in the way: two namespaces on a Linux bridge, a perf
client writing to a perf server at D = 1 with 100 Gb/s planes, so pacing
never holds the sender back and only the endpoints' own work limits it.
Figures: data packets per second sent by the client process, and received
by the server process (which also sends the acknowledgements), over the
bandwidth phase; medians of `repetitions` runs.
"""

from __future__ import annotations

import os
import platform
import statistics
from typing import Any

from emu.bench.lab import bridge_pair
from emu.roce.run import PerfRun
from emu.units import parse_size


def _once(nbytes: int, mtu: int, message: int) -> dict[str, float]:
    with bridge_pair("r", mtu=max(1500, mtu + 200)) as lab:
        def popen(i: int):
            return lambda cmd: lab.popen(i, cmd, stdout=-1, stderr=-1, text=True)

        client, server = PerfRun(popen(0), popen(1), nbytes=nbytes, dilation=1.0, lat_iters=0, mtu=mtu,
                                 message=message, timeout=120).wait()
    if not server["data_ok"]:
        raise RuntimeError("emu bench roce: the server's memory does not hold what the client wrote")
    sent = sum(p["tx_packets"] for p in client["planes"])
    wall = client["elapsed_s"]  # the device's fabric seconds, which are wall seconds at D = 1
    return {"client_kpps": sent / wall / 1e3, "gbps_wall": nbytes * 8 / wall / 1e9,
            "retransmits": client["retransmits"], "packets": sent}


def run(params: dict[str, str]) -> dict[str, Any]:
    nbytes = parse_size(params.get("bytes", "32MiB"))
    mtu = int(params.get("mtu", 1024))
    reps = int(params.get("repetitions", 3))
    message = parse_size(params.get("message", "1MiB"))
    runs = [_once(nbytes, mtu, message) for _ in range(reps)]
    return {
        "bench": "roce",
        "mtu": mtu,
        "client_kpps": statistics.median(r["client_kpps"] for r in runs),
        "goodput_gbps_wall": statistics.median(r["gbps_wall"] for r in runs),
        "runs": runs,
        "how": f"perf write of {nbytes} B in {message} B messages, MTU {mtu}, one plane, two namespaces on a "
               f"Linux bridge, D=1 with 100 Gb/s planes (pacing never limits); data packets the client process "
               f"sent per wall second over the bandwidth phase; median of {reps}",
        "machine": f"{platform.machine()} Linux {platform.release()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
    }
