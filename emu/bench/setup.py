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

`steps` times the parts on their own: `namespaces` namespaces, each with a
veth from here, an address and a route, then deleted, made once with `ip
-batch` and once over netlink as the emulator makes them.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from mininet.link import Link
from mininet.log import lg
from mininet.net import Mininet
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo

from emu.net.fabric import FabricNet
from emu.net.netlink import NETNS_DIR, Netlink, create_namespace, new_group, remove_namespace
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


def _ip(lines: list[str], ns: str = "") -> None:
    subprocess.run(["ip", *(["-n", ns] if ns else []), "-batch", "-"], input="\n".join(lines) + "\n", text=True,
                   check=True, capture_output=True)


def steps(n: int) -> dict[str, dict[str, float]]:
    """`n` namespaces, each with a veth from here, an address and a route, then all deleted: each step
    timed done both ways, `ip -batch` (one process for what one namespace can take in a batch) and
    this project's netlink (emu.net.netlink). Seconds per step."""
    tag = f"emus{os.getpid() % 1000}"
    ns = [f"{tag}-{i}" for i in range(n)]
    out: dict[str, dict[str, float]] = {}
    t = [time.monotonic()]

    def lap() -> float:
        t.append(time.monotonic())
        return round(t[-1] - t[-2], 3)

    way: dict[str, float] = {}
    try:
        mark = new_group()  # a group of this process's: `emu clean` leaves these emu* veths while it runs
        _ip([f"netns add {x}" for x in ns] + [f"link add {tag}v{i} group {mark} type veth peer name eth0 netns {x}"
                                              for i, x in enumerate(ns)])
        way["create"] = lap()
        for i, x in enumerate(ns):
            _ip(["link set eth0 up", f"addr add 10.{i // 250}.{i % 250}.2/24 dev eth0"], x)
        way["address"] = lap()
        for i, x in enumerate(ns):
            _ip([f"route add 10.200.0.0/16 via 10.{i // 250}.{i % 250}.1"], x)
        way["route"] = lap()
    finally:
        lap()
        subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, text=True,
                       input="\n".join([f"link del {tag}v{i}" for i in range(n)] + [f"netns del {x}" for x in ns]))
        way["delete"] = lap()
    out["ip -batch"] = way
    way = {}
    group = new_group()
    made: list[str] = []
    lap()
    try:
        with Netlink.here() as root:
            for i, x in enumerate(ns):
                create_namespace(x)
                made.append(x)
                fd = os.open(os.path.join(NETNS_DIR, x), os.O_RDONLY)
                try:
                    root.add_veth(f"{tag}v{i}", "eth0", group=group, peer_fd=fd)
                finally:
                    os.close(fd)
            way["create"] = lap()
            for i, x in enumerate(ns):
                with Netlink.of_name(x) as nl:
                    nl.set_link("eth0", up=True)
                    nl.add_address("eth0", f"10.{i // 250}.{i % 250}.2/24")
            way["address"] = lap()
            for i, x in enumerate(ns):
                with Netlink.of_name(x) as nl:
                    nl.add_route("10.200.0.0/16", f"10.{i // 250}.{i % 250}.1", "eth0")
            way["route"] = lap()
    finally:
        lap()
        with Netlink.here() as root:
            root.delete_group(group)
        for x in made:
            remove_namespace(x)
        way["delete"] = lap()
    out["netlink"] = way
    return out


def run(params: dict[str, str]) -> dict[str, Any]:
    cases = params.get("topo", "fpf,tahan,tahan-next").split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"bench setup: unknown --topo {', '.join(unknown)}; known: {', '.join(CASES)}")
    reps = int(params.get("repetitions", 3))
    if reps < 1:
        raise ValueError(f"bench setup: --repetitions must be at least 1, got {reps}")
    n_steps = int(params.get("namespaces", 100))
    out = []
    quiet = lg.getEffectiveLevel()
    lg.setLogLevel("error")  # LinuxBridge's warnings about bridge-nf-call are not this bench's findings
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
    lg.setLevel(quiet)
    return {
        "bench": "setup",
        "cases": out,
        "steps": {"namespaces": n_steps, **steps(n_steps)} if n_steps else {},
        "passed": all(r["emu"]["left_behind"] == 0 for r in out),
        "how": f"median of {reps} alternating repetitions each; up: topology object to a started network (emu: "
               "hosts addressed and routed, engine workers answering, D=10000; mininet: Linux bridges with STP, "
               "its default host addresses); down: stop() returning; left_behind: the graph's interfaces and "
               "Mininet shells still present after stop, summed over repetitions",
        "machine": f"{platform.machine()} Linux {platform.release()}, {os.cpu_count()} cores",
    }


def table(result: dict[str, Any]) -> str:
    """The result for a person: seconds per phase, both ways, and the ratio."""
    lines = ["# bring-up and tear-down: emu (FabricNet) vs plain Mininet, same graph, same run",
             f"#{'topology':>11} {'hosts':>6} {'switches':>8} {'links':>6} {'emu up':>8} {'down':>7} {'total':>7} "
             f"{'mn up':>8} {'down':>7} {'total':>7} {'ratio':>6} {'left':>5}"]
    for c in result["cases"]:
        e, m = c["emu"], c["mininet"]
        lines.append(f" {c['topology']:>11} {c['hosts']:>6} {c['switches']:>8} {c['links']:>6} {e['up_s']:>7.2f}s "
                     f"{e['down_s']:>6.2f}s {e['total_s']:>6.2f}s {m['up_s']:>7.2f}s {m['down_s']:>6.2f}s "
                     f"{m['total_s']:>6.2f}s {c['ratio']:>5.2f}x {e['left_behind'] + m['left_behind']:>5}")
    st = result.get("steps") or {}
    if st:
        lines.append(f"# steps: {st['namespaces']} namespaces, each a veth from here, an address and a route, "
                     "then deleted (seconds)")
        lines.append(f"#{'way':>11} {'create':>8} {'address':>8} {'route':>8} {'delete':>8}")
        for way in ("ip -batch", "netlink"):
            w = st[way]
            lines.append(f" {way:>11} {w['create']:>8.3f} {w['address']:>8.3f} {w['route']:>8.3f} {w['delete']:>8.3f}")
    lines.append(f"# {result['how']}; {result['machine']}")
    return "\n".join(lines)
