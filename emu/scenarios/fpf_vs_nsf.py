"""FPF against NSF for the same GPUs: hops, base round trip, switches, bisection.

Both fabrics are built in turn; between the two GPUs furthest apart, the hop
count is read from the TTL of ping replies (each switch takes one off) and
the base RTT is the fastest of the pings, in fabric time. Switch count is
what was built; bisection is computed from link capacities, as the max flow
between the two halves of the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.link import FabricLink
from emu.net.switch import RunSettings
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below
from emu.topo.fpf import FPFTopo
from emu.topo.nsf import NSFTopo


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


@dataclass
class FpfVsNsf(Scenario):
    """`gpus` GPUs as FPF with `planes` planes, and as NSF with the same bandwidth per GPU in one plane;
    measured between gpu0 and the last GPU."""

    name = "fpf-vs-nsf"
    headline = ("fpf.switch_hops", "nsf.switch_hops", "fpf.base_rtt_fabric_s", "nsf.base_rtt_fabric_s")
    default_dilation = 1000.0

    gpus: int = 8
    planes: int = 8

    def check(self) -> None:
        if self.gpus < 2 or self.planes < 1:
            raise ScenarioError("fpf-vs-nsf: needs 2+ GPUs and 1+ planes")

    def load_pps(self) -> float:
        """Twenty pings a second: nothing to keep up with (--dilation auto then takes its floor)."""
        return 20.0

    def topologies(self) -> dict[str, Any]:
        return {"fpf": FPFTopo(gpus=self.gpus, planes=self.planes, leaves=2, spines=1),
                "nsf": NSFTopo(gpus=self.gpus, gpus_per_rack=max(1, self.gpus // 4), racks_per_pod=2, fsw=2, spines=1,
                               rate=f"{100 * self.planes}G")}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        """Hops from the TTL of ping replies (each switch takes one off), base RTT the fastest ping."""
        rtts, ttls = net.round_trips("gpu0", net.get(f"gpu{self.gpus - 1}").IP(), count=10, family=4)
        gpus = sorted((h.name for h in net.hosts), key=lambda n: int(n[3:]))
        return {
            "switch_hops": 64 - min(ttls) if ttls else None,
            "base_rtt_fabric_s": min(rtts) if rtts else None,
            "replies": len(rtts),
            "switches": len(net.switches),
            "links": len(net.links),
            "bisection_bps": bisection_bps(net, gpus),
            "fidelity": net.verdict(),
        }

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        return {"gpus": self.gpus, "planes": self.planes, "between": ["gpu0", f"gpu{self.gpus - 1}"], **parts,
                "fidelity": combine({role: part["fidelity"] for role, part in parts.items()})}

    def missing(self, result: dict[str, Any]) -> list[str]:
        return [f"no ping reply on {role}" for role in ("fpf", "nsf") if not result[role]["replies"]]

    def verdict(self, result: dict[str, Any]) -> bool:
        """FPF takes fewer hops and a shorter base round trip between the same two GPUs."""
        fpf, nsf = result["fpf"], result["nsf"]
        return (fpf["replies"] > 0 and nsf["replies"] > 0 and fpf["switch_hops"] < nsf["switch_hops"]
                and fpf["base_rtt_fabric_s"] < nsf["base_rtt_fabric_s"])

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        fpf, nsf = result["fpf"], result["nsf"]
        keys = [("switch_hops", "switch hops"), ("base_rtt_fabric_s", "base RTT (us)")]
        for i, (k, _) in enumerate(keys):
            scale = 1e6 if k.endswith("_s") else 1
            ax.bar([i - 0.2], [fpf[k] * scale], 0.4, color="tab:blue", label="FPF" if i == 0 else None)
            ax.bar([i + 0.2], [nsf[k] * scale], 0.4, color="tab:orange", label="NSF" if i == 0 else None)
        ax.set_xticks(range(len(keys)), [label for _, label in keys])
        ax.set_title(f"{self.gpus} GPUs: FPF ({self.planes} planes) vs NSF, {' to '.join(result['between'])}")
        legend_below(ax)
