"""SRv6 traffic engineering on the regional backbone: steer a flow the long way, and back.

Campus 0's edge router reaches campus 1 over the short side of the ring
(r0-r1-r2). A policy pushed live to pe0 encapsulates campus 1's IPv6 traffic
with segments [r4 End, r3 End, pe1 End.DT6], so it goes r0-r4-r3-r2 and is
decapsulated at pe1; removing the policy brings it back. Which way each
phase went is read from the routers' own counters, not assumed, and the
round trip is measured with ping.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from emu.net.fidelity import fabric_fidelity
from emu.net.switch import RunSettings
from emu.scenarios.common import Flow, Traffic, fabric, int_param, only, save
from emu.topo.rbb import RBBTopo, dt6_sid, end_sid

DEFAULT_DILATION = 1000.0
PORT = 9300
DST = "fd00:1:0::2"


def load_pps(params: dict[str, str]) -> float:
    """One 10G flow of 1000-byte datagrams (for --dilation auto)."""
    return 10e9 / (1042 * 8)


def _forwarded(stats: dict[str, Any], routers: list[str]) -> dict[str, int]:
    return {r: sum(p["tx_packets"] for p in stats["switches"][r]["ports"].values()) for r in routers}


def run(params: dict[str, str], settings: RunSettings, out_dir: str) -> dict[str, Any]:
    only(params, {"packets"}, "srv6-te")
    packets = int_param(params, "packets", 200, "srv6-te")
    p = RBBTopo(routers=5, campuses=2, hosts_per_campus=1)
    routers = [f"r{k}" for k in range(p.routers)]
    long_way = [end_sid(4), end_sid(3), dt6_sid(p.pe_id(1))]
    phases: list[dict[str, Any]] = []
    with fabric(p, settings) as net:
        src = net.get("pe0").loopback6
        net.get("c0h0").cmd(f"ping -6 -c2 -W2 {DST}")  # neighbours resolved before anything is counted

        def phase(name: str) -> None:
            before = _forwarded(net.engine.stats(), routers)
            flow = Flow("c0h0", "c1h0", DST, PORT, packets * 1000, 10e9, size=1000)
            sent, got = Traffic(net, [flow], dilation=settings.dilation).wait()
            out = net.get("c0h0").cmd(f"ping -6 -c5 -i0.05 {DST}")
            rtts = [float(x) / 1e3 / settings.dilation for x in re.findall(r"time=([\d.]+) ms", out)]
            after = _forwarded(net.engine.stats(), routers)
            phases.append({
                "phase": name,
                "sent_bytes": sent[0]["sent_bytes"],
                "received_bytes": got[("c1h0", PORT, True)]["received_bytes"],
                "forwarded_by_router": {r: after[r] - before[r] for r in routers},
                "rtt_fabric_s": statistics.median(rtts) if rtts else None,
            })

        phase("shortest")
        net.control.set_policy("pe0", "fd00:1::/64", long_way, src)
        phase("policy")
        net.control.clear_policy("pe0", "fd00:1::/64")
        phase("restored")
        stats = net.engine.stats()
    short, steered, _ = phases
    result = {
        "scenario": "srv6-te",
        "dilation": settings.dilation,
        "segments": long_way,
        "phases": phases,
        "fidelity": fabric_fidelity(stats, rate_bps=400e9),
    }
    # The flow is `packets` datagrams: a router it crossed forwarded at least that many in the phase.
    crossed = {ph["phase"]: sorted(r for r, n in ph["forwarded_by_router"].items() if n >= packets) for ph in phases}
    result["routers_crossed"] = crossed
    result["passed"] = (
        "r1" in crossed["shortest"] and not {"r3", "r4"} & set(crossed["shortest"])
        and {"r3", "r4"} <= set(crossed["policy"]) and "r1" not in crossed["policy"]
        and "r1" in crossed["restored"] and not {"r3", "r4"} & set(crossed["restored"])
        and all(ph["received_bytes"] == ph["sent_bytes"] for ph in phases)
        and steered["rtt_fabric_s"] > short["rtt_fabric_s"]
    )

    def draw(ax: Any) -> None:
        width = 0.25
        for i, ph in enumerate(phases):
            ax.bar([k + (i - 1) * width for k in range(len(routers))],
                   [ph["forwarded_by_router"][r] for r in routers], width, label=ph["phase"])
        ax.set_xticks(range(len(routers)), routers)
        ax.set_ylabel("packets forwarded in the phase")
        ax.set_title("SRv6 policy on pe0: the flow's path, from router counters")
        ax.legend()

    return save(out_dir, "srv6-te", result, draw)
