"""The BAG latency cliff: the same allreduce within one building and across buildings.

The seeds' claim: BAG joins buildings and regions into one training fabric,
but the long-haul links between them are tens of kilometres of fibre, so a
collective that crosses them pays their round trip on every step, and one
that stays in a building does not. Two runs of the same ring allreduce
(same hosts per ring, same sizes, same link rates) over MetaRoCE: four hosts
in one building, then two hosts in each of two regions joined by BAG
switches over `distance` of fibre. Time and busbw side by side; every run's
fidelity verdict is part of the result (on the fabric clock by default; on
the wall clock at auto D unless --dilation is given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError
from emu.topo.bag import BAGTopo
from emu.units import format_size


@dataclass
class BagCollective(Scenario):
    """An allreduce of `size` over 2 x `hosts` GPUs, within one building and across two regions joined
    by BAG switches over `distance` of fibre."""

    name = "bag-collective"
    headline = ("within_building.wrong", "across_buildings.wrong", "time_ratio")
    fabric_clock = True  # its ranks run inside the engine: exact, no D to choose

    distance: str = "20km"
    size: str = "1MiB"
    hosts: int = 1

    def check(self) -> None:
        if self.as_distance("distance") <= 0 or self.hosts < 1 or self.as_size("size") < 1024:
            raise ScenarioError("bag-collective: distance > 0, hosts per building >= 1, size >= 1KiB")

    def load_pps(self) -> float:
        """Every rank sending at its 400G line rate at once."""
        return 2 * self.hosts * 400e9 / ((1024 + HEADERS) * 8)

    def topologies(self) -> dict[str, Any]:
        common = {"leaves": 1, "spines": 1, "rate": "400G", "fabric_rate": "400G", "bag_rates": "400G"}
        return {"within": BAGTopo(regions=1, hosts_per_leaf=2 * self.hosts, **common),
                "across": BAGTopo(regions=2, hosts_per_leaf=self.hosts, distance=self.distance, **common)}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        return net.collective("allreduce", sizes=[self.as_size("size")]).report

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        def side(r: dict[str, Any]) -> dict[str, Any]:
            row = r["rows"][0]
            return {"time_us": row["time_us"], "busbw_GBps": row["busbw_GBps"], "busbw_of_bound": row["busbw_of_bound"],
                    "wrong": row["wrong"], "dilation": r["dilation"], "fidelity": r["fidelity"]}

        w, a = side(parts["within"]), side(parts["across"])
        return {"op": "allreduce", "size": parts["within"]["rows"][0]["size"], "ranks": 2 * self.hosts,
                "distance_m": self.as_distance("distance"), "within_building": w, "across_buildings": a,
                "time_ratio": a["time_us"] / w["time_us"],
                "fidelity": combine({"within": w["fidelity"], "across": a["fidelity"]})}

    def verdict(self, result: dict[str, Any]) -> bool:
        w, a = result["within_building"], result["across_buildings"]
        return w["wrong"] == a["wrong"] == 0 and result["time_ratio"] >= 2 and result["fidelity"]["ok"]

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        w, a = result["within_building"], result["across_buildings"]
        labels = ["within one building", f"across buildings ({result['distance_m'] / 1000:g} km)"]
        ax.bar([0, 1], [w["time_us"], a["time_us"]], 0.5, color=["tab:blue", "tab:red"])
        ax.set_xticks([0, 1], labels)
        ax.set_ylabel("allreduce time (us, fabric)")
        for i, row in enumerate((w, a)):
            ax.annotate(f"{row['time_us']:.0f} us\nbusbw {row['busbw_GBps']:.1f} GB/s", (i, row["time_us"]),
                        ha="center", va="bottom")
        ax.set_title(f"BAG: allreduce of {format_size(result['size'])} over {result['ranks']} GPUs, MetaRoCE")
        ax.set_ylim(0, a["time_us"] * 1.3)
