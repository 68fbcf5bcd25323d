"""`emu bench cut`: what would cross machines if a fabric were split as emu.cluster.placement splits it.

One allreduce on one machine, on the fabric clock (exact), counted on the links the placement cuts:
frames and bytes that would cross between machines per fabric millisecond, and the window barriers the
placement's lookahead allows. What a cluster run's channels will carry, known before there is a cluster
(docs/cluster.md).

    sudo emu bench cut --topo bag --parts 2 --size 4MiB
"""

from __future__ import annotations

from typing import Any

from emu.cluster.placement import place
from emu.net.fabric import FabricNet
from emu.topo import make_topo
from emu.units import parse_size


def run(params: dict[str, str]) -> dict[str, Any]:
    """params: topo (default bag), parts (machines to split over, default 2), size (the allreduce, default
    4MiB), and any other key as the topology's parameter."""
    params = dict(params)
    name = params.pop("topo", "bag")
    try:
        parts = int(params.pop("parts", "2"))
    except ValueError:
        raise ValueError("--parts is a whole number of machines") from None
    if parts < 2:
        raise ValueError("--parts: a split needs at least 2 machines")
    size = params.pop("size", "4MiB")
    parse_size(size)  # a bad size is said before anything is built
    topo = make_topo(name, params)
    p = place(topo, [f"m{i + 1}" for i in range(parts)])
    with FabricNet(topo, clock="fabric", kernel=False) as net:
        before = net.stats()
        r = net.collective("allreduce", sizes=[size])
        after = net.stats()
        frames = nbytes = 0
        for a, b, _ in p.cut:
            for lk in net.linksBetween(net.get(a), net.get(b)):
                for intf in (lk.intf1, lk.intf2):
                    if intf.node.name in after.switches:
                        frames += after.port(intf.node.name, intf.name).tx_packets - \
                            before.port(intf.node.name, intf.name).tx_packets
                        nbytes += after.port(intf.node.name, intf.name).tx_bytes - \
                            before.port(intf.node.name, intf.name).tx_bytes
    fabric_ms = r.rows[0].time_us / 1e3
    return {"bench": "cut", "topo": name, "params": params, "parts": parts, "split_by": p.by, "cut_links": len(p.cut),
            "lookahead_s": p.lookahead_s, "allreduce_bytes": r.rows[0].size, "nranks": r.nranks, "allreduce_fabric_s": fabric_ms / 1e3,
            "wrong": r.wrong, "crossing_frames": frames, "crossing_bytes": nbytes,
            "crossing_frames_per_fabric_ms": frames / fabric_ms, "crossing_bytes_per_fabric_ms": nbytes / fabric_ms,
            "windows_per_fabric_ms": 1 / (p.lookahead_s * 1e3), "fidelity": r.fidelity,
            "how": "one allreduce on this machine on the fabric clock (exact); frames and bytes counted on the links "
                   "the placement cuts, both directions; windows: one barrier per lookahead"}
