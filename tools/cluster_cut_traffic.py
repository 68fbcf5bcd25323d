"""What would cross machines if a fabric were split as emu.cluster.placement splits it: frames and
bytes on the cut links, and the window barriers the lookahead allows, per fabric millisecond of a
collective. Measured on one machine, on the fabric clock (exact).

    sudo .venv/bin/python tools/cluster_cut_traffic.py bag 2 4MiB
"""

from __future__ import annotations

import sys

from emu import FabricNet
from emu.cluster.placement import place
from emu.topo import make_topo


def main(name: str, machines: int, size: str) -> None:
    topo = make_topo(name, {})
    p = place(topo, [f"m{i + 1}" for i in range(machines)])
    with FabricNet(topo, clock="fabric") as net:
        before = net.stats()
        r = net.collective("allreduce", sizes=[size])
        after = net.stats()
        frames = nbytes = 0
        for a, b, _ in p.cut:
            for lk in net.linksBetween(net.get(a), net.get(b)):
                for intf in (lk.intf1, lk.intf2):
                    if intf.node.name in after.switches:
                        frames += (after.port(intf.node.name, intf.name).tx_packets
                                   - before.port(intf.node.name, intf.name).tx_packets)
                        nbytes += (after.port(intf.node.name, intf.name).tx_bytes
                                   - before.port(intf.node.name, intf.name).tx_bytes)
    fabric_ms = r.rows[0].time_us / 1e3
    print(f"{name} over {machines} machines, split by {p.by}: {len(p.cut)} cut links, lookahead "
          f"{p.lookahead_s * 1e6:g} us; allreduce {size} took {fabric_ms * 1e3:.1f} us of fabric time, #wrong "
          f"{r.wrong}; across machines per fabric ms: {frames / fabric_ms:,.0f} frames, "
          f"{nbytes / fabric_ms / 1e6:,.1f} MB, {1 / (p.lookahead_s * 1e3):,.0f} windows (barriers per machine pair)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
