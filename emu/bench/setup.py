"""`emu bench setup`: the emulator's bring-up and tear-down against plain Mininet building the same
graph, in the same run.

Plain Mininet gets the same nodes and links (names and ports), its own
Link (a veth pair by `ip link add` in a node's shell, `ifconfig` per
interface), Linux bridges for the switches (with STP, so the graph's loops
do not storm while it is measured) and its default host addresses. The
emulator does more: FabricNet, every plane address and route on every host,
the engine's workers started with every port open and answering. Each is
timed from the topology object to a started network (up) and from there to
its stop returning (down); after each stop nothing of it may be left: no
interface, namespace or process (counted, and reported). Repetitions
alternate the two; medians; the ratio is the emulator's over Mininet's.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from mininet.link import Link
from mininet.net import Mininet
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo

from emu.net.fabric import FabricNet
from emu.net.netlink import Netlink
from emu.topo import FabricTopo, FPFTopo, TahanTopo

CASES: dict[str, Callable[[], FabricTopo]] = {
    "fpf": lambda: FPFTopo(gpus=16, planes=8),
    "tahan": lambda: TahanTopo(),
    "tahan-next": lambda: TahanTopo(preset="next"),
}


class SameGraph(Topo):
    """`fabric`'s nodes and links, and nothing else: what plain Mininet builds for the comparison."""

    def build(self, fabric: FabricTopo) -> None:  # type: ignore[override]
        for h in fabric.hosts():
            self.addHost(h)
        for i, s in enumerate(fabric.switches()):
            self.addSwitch(s, dpid=f"{i + 1:016x}")
        for a, b, info in fabric.links(withInfo=True):
            self.addLink(info.get("node1", a), info.get("node2", b), port1=info.get("port1"),
                         port2=info.get("port2"))


def _leftovers(names: set[str]) -> int:
    """Interfaces of the graph still here, plus Mininet node shells still running."""
    with Netlink.here() as nl:
        here = sum(1 for li in nl.links() if li.name in names)
    shells = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    shells += b"mininet:" in f.read()
            except OSError:
                pass
    return here + shells


def _time(make: Callable[[], Mininet], names: set[str]) -> dict[str, float]:
    t0 = time.monotonic()
    net = make()
    try:
        net.start()
    except BaseException:
        net.stop()
        raise
    t1 = time.monotonic()
    net.stop()
    t2 = time.monotonic()
    return {"up_s": t1 - t0, "down_s": t2 - t1, "left": _leftovers(names)}


def _names(topo: FabricTopo) -> set[str]:
    out = set(topo.switches())
    for a, b, info in topo.links(withInfo=True):
        for node, port in ((info.get("node1", a), info.get("port1")), (info.get("node2", b), info.get("port2"))):
            out.add(f"{node}-eth{port}")
    return out


def run(params: dict[str, str]) -> dict[str, Any]:
    cases = params.get("topo", "fpf,tahan,tahan-next").split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"bench setup: unknown --topo {', '.join(unknown)}; known: {', '.join(CASES)}")
    reps = int(params.get("repetitions", 3))
    if reps < 1:
        raise ValueError(f"bench setup: --repetitions must be at least 1, got {reps}")
    out = []
    for case in cases:
        topo = CASES[case]()
        names = _names(topo)
        emu_runs, mn_runs = [], []
        for _ in range(reps):
            emu_runs.append(_time(lambda topo=topo: FabricNet(topo, dilation=10_000), names))
            mn_runs.append(_time(lambda topo=topo: Mininet(SameGraph(fabric=topo), link=Link, controller=None,  # type: ignore[misc]
                                                           switch=partial(LinuxBridge, stp=True)), names))
        row: dict[str, Any] = {"topology": case, "hosts": len(topo.hosts()), "switches": len(topo.switches()),
                               "links": len(topo.links())}
        for who, runs in (("emu", emu_runs), ("mininet", mn_runs)):
            up = statistics.median(r["up_s"] for r in runs)
            down = statistics.median(r["down_s"] for r in runs)
            row[who] = {"up_s": round(up, 3), "down_s": round(down, 3), "total_s": round(up + down, 3),
                        "left_behind": sum(r["left"] for r in runs),
                        "runs": [{k: round(v, 3) for k, v in r.items()} for r in runs]}
        row["ratio"] = round(row["emu"]["total_s"] / row["mininet"]["total_s"], 3)
        out.append(row)
    return {
        "bench": "setup",
        "cases": out,
        "passed": all(r["emu"]["left_behind"] == 0 for r in out),
        "how": f"median of {reps} alternating repetitions each; up: topology object to a started network (emu: "
               "hosts addressed and routed, engine workers answering, D=10000; mininet: Linux bridges with STP, "
               "its default host addresses); down: stop() returning; left_behind: the graph's interfaces and "
               "Mininet shells still present after stop, summed over repetitions",
        "machine": f"{platform.machine()} Linux {platform.release()}, {os.cpu_count()} cores",
    }
