"""FPF against NSF for the same GPUs: hops, base round trip, switches, bisection.

Both fabrics are built in turn; between the two GPUs furthest apart, the hop
count is read from the TTL of ping replies (each switch takes one off) and
the base RTT is the fastest of the pings, in fabric time. Switch count is
what was built; bisection is computed from link capacities, as the max flow
between the two halves of the GPUs.
"""

from __future__ import annotations

import re
from typing import Any

import networkx as nx

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.fidelity import fabric_fidelity
from emu.net.link import FabricLink
from emu.net.switch import RunSettings
from emu.scenarios.common import fabric, int_param, only, save
from emu.topo.fpf import FPFTopo
from emu.topo.nsf import NSFTopo

DEFAULT_DILATION = 1000.0


def load_pps(params: dict[str, str]) -> float:
    """Twenty pings a second: nothing to keep up with (for --dilation auto, which then takes its floor)."""
    return 20.0


def bisection_bps(net: FabricNet, gpus: list[str]) -> float:
    g = nx.DiGraph()
    for link in net.links:
        if not isinstance(link, FabricLink):
            continue
        a, b = link.intf1.node.name, link.intf2.node.name
        for u, v in ((a, b), (b, a)):
            cap = g.get_edge_data(u, v, {"capacity": 0.0})["capacity"] + link.fabric.rate_bps
            g.add_edge(u, v, capacity=cap)
    half = len(gpus) // 2
    for h in gpus[:half]:
        g.add_edge("SRC", h, capacity=float("inf"))
    for h in gpus[half:]:
        g.add_edge(h, "DST", capacity=float("inf"))
    return nx.maximum_flow_value(g, "SRC", "DST")


def measure(net: FabricNet, dst_ip: str, dilation: float) -> dict[str, Any]:
    out = net.get("gpu0").cmd(f"ping -c10 -i0.05 -W2 {dst_ip}")
    rtts = [float(x) / 1e3 / dilation for x in re.findall(r"time=([\d.]+) ms", out)]
    ttls = [int(x) for x in re.findall(r"ttl=(\d+)", out)]
    gpus = sorted((h.name for h in net.hosts), key=lambda n: int(n[3:]))
    return {
        "switch_hops": 64 - min(ttls) if ttls else None,
        "base_rtt_fabric_s": min(rtts) if rtts else None,
        "replies": len(rtts),
        "switches": len(net.switches),
        "links": len(net.links),
        "bisection_bps": bisection_bps(net, gpus),
        "fidelity": fabric_fidelity(net.engine.stats()),
    }


def run(params: dict[str, str], settings: RunSettings, out_dir: str) -> dict[str, Any]:
    only(params, {"gpus", "planes"}, "fpf-vs-nsf")
    gpus = int_param(params, "gpus", 8, "fpf-vs-nsf")
    planes = int_param(params, "planes", 8, "fpf-vs-nsf")
    far = gpus - 1
    with fabric(FPFTopo(gpus=gpus, planes=planes, leaves=2, spines=1), settings) as net:
        fpf = measure(net, net.get(f"gpu{far}").IP(), settings.dilation)
    gpus_per_rack = max(1, gpus // 4)
    with fabric(NSFTopo(gpus=gpus, gpus_per_rack=gpus_per_rack, racks_per_pod=2, fsw=2, spines=1,
                        rate=f"{100 * planes}G"), settings) as net:
        nsf = measure(net, net.get(f"gpu{far}").IP(), settings.dilation)
    result = {"scenario": "fpf-vs-nsf", "dilation": settings.dilation, "gpus": gpus, "planes": planes,
              "between": ["gpu0", f"gpu{far}"], "fpf": fpf, "nsf": nsf,
              "fidelity": combine({"fpf": fpf["fidelity"], "nsf": nsf["fidelity"]})}
    result["passed"] = (fpf["replies"] > 0 and nsf["replies"] > 0 and fpf["switch_hops"] < nsf["switch_hops"]
                        and fpf["base_rtt_fabric_s"] < nsf["base_rtt_fabric_s"])

    def draw(ax: Any) -> None:
        keys = [("switch_hops", "switch hops"), ("base_rtt_fabric_s", "base RTT (us)")]
        for i, (k, _) in enumerate(keys):
            scale = 1e6 if k.endswith("_s") else 1
            ax.bar([i - 0.2], [fpf[k] * scale], 0.4, color="tab:blue", label="FPF" if i == 0 else None)
            ax.bar([i + 0.2], [nsf[k] * scale], 0.4, color="tab:orange", label="NSF" if i == 0 else None)
        ax.set_xticks(range(len(keys)), [label for _, label in keys])
        ax.set_title(f"{gpus} GPUs: FPF ({planes} planes) vs NSF, gpu0 to gpu{far}")
        ax.legend()

    return save(out_dir, "fpf-vs-nsf", result, draw)
