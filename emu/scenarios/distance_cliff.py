"""The distance cliff: one allreduce across two BAG regions, ring, tree and hierarchical, as the fibre
between the regions grows from 2 km to 500 km.

The seeds' claims: collective libraries pick an algorithm without knowing
distance, and a ring that crosses a long link pays its latency at every one of
its 2(n-1) steps, a cliff in busbw as the regions move apart; an algorithm
that knows where the long links are (reduce-scatter inside each region, an
allreduce of each shard across, allgather inside) crosses them in two steps
and carries fewer bytes over them, and keeps collective traffic off BAG. Each
distance is a fabric of its own (two regions of `hosts` GPUs, 400G
everywhere); the three algorithms run on it in turn, inside the engine, with
the data checked. Reported: time and busbw against distance, and the bytes
each algorithm put on the long-haul links.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below, long_haul_bytes
from emu.topo.bag import BAGTopo
from emu.units import format_size, parse_distance

ALGOS = ("ring", "tree", "hier")


@dataclass
class DistanceCliff(Scenario):
    """An allreduce of `size` over two regions of `hosts` GPUs each, at each of `distances` of fibre
    between them, with the ring, NCCL's double binary tree and the hierarchical algorithm."""

    name = "distance-cliff"
    headline = ("hier_over_ring_at_50km", "ring_slowdown_2_to_500km", "hier_slowdown_2_to_500km", "wrong")
    fabric_clock = True  # the ranks run inside the engine: exact at any distance
    wall_clock = False  # 500 km of fibre at a D a wall clock could keep would take hours

    size: str = "1MiB"
    hosts: int = 4
    distances: str = "2km,10km,50km,200km,500km"

    def check(self) -> None:
        if self.hosts < 1 or self.as_size("size") < 4096:
            raise ScenarioError("distance-cliff: hosts per region >= 1, size >= 4KiB")
        try:
            metres = [parse_distance(d) for d in self.distances.split(",")]
        except ValueError as exc:
            raise ScenarioError(f"distance-cliff: distances: {exc}") from None
        if "50km" not in self.distances.split(",") or any(m <= 0 for m in metres):
            raise ScenarioError("distance-cliff: distances are lengths > 0, comma-separated, 50km among them "
                                "(the verdict compares the algorithms there)")

    def load_pps(self) -> float:
        return 2 * self.hosts * 400e9 / ((1024 + HEADERS) * 8)

    def topologies(self) -> dict[str, Any]:
        common = {"regions": 2, "leaves": 1, "spines": 1, "hosts_per_leaf": self.hosts, "rate": "400G",
                  "fabric_rate": "400G", "bag_rates": "400G"}
        return {d: BAGTopo(distance=d, **common) for d in self.distances.split(",")}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        out = {}
        for algo in ALGOS:
            before = long_haul_bytes(net)
            r = net.collective("allreduce", sizes=[self.as_size("size")], algo=algo).report
            out[algo] = {"time_us": r["rows"][0]["time_us"], "busbw_GBps": r["rows"][0]["busbw_GBps"],
                         "wrong": r["wrong"], "long_haul_bytes": long_haul_bytes(net) - before,
                         "fidelity": r["fidelity"]}
        return out

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        rows = [{"distance": d, "distance_m": parse_distance(d), **{a: parts[d][a] for a in ALGOS}} for d in parts]
        first, last = rows[0], rows[-1]
        at50 = next(r for r in rows if r["distance"] == "50km")
        return {"size": self.as_size("size"), "ranks": 2 * self.hosts, "rows": rows,
                "hier_over_ring_at_50km": at50["ring"]["time_us"] / at50["hier"]["time_us"],
                "long_haul_bytes_ring_over_hier": at50["ring"]["long_haul_bytes"] / max(1, at50["hier"]["long_haul_bytes"]),
                "ring_slowdown_2_to_500km": last["ring"]["time_us"] / first["ring"]["time_us"],
                "hier_slowdown_2_to_500km": last["hier"]["time_us"] / first["hier"]["time_us"],
                "wrong": sum(r[a]["wrong"] for r in rows for a in ALGOS),
                "fidelity": combine({f"{r['distance']}-{a}": r[a]["fidelity"] for r in rows for a in ALGOS})}

    def verdict(self, result: dict[str, Any]) -> bool:
        """The data right everywhere; at 50 km the hierarchical algorithm is faster than the ring, and
        from the nearest distance to the farthest the ring loses more than it does."""
        return (result["wrong"] == 0 and result["hier_over_ring_at_50km"] > 1.0
                and result["ring_slowdown_2_to_500km"] > result["hier_slowdown_2_to_500km"]
                and bool(result["fidelity"]["ok"]))

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        km = [r["distance_m"] / 1000 for r in result["rows"]]
        first = result["rows"][0]
        for algo, colour in zip(ALGOS, ("tab:red", "tab:green", "tab:blue"), strict=True):
            ax.plot(km, [r[algo]["busbw_GBps"] for r in result["rows"]], "o-", color=colour,
                    label=f"{algo} ({format_size(first[algo]['long_haul_bytes'])} over BAG at {first['distance']})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("fibre between the regions (km)")
        ax.set_ylabel("busbw (GB/s, fabric)")
        ax.set_title(f"Allreduce of {format_size(result['size'])} over {result['ranks']} GPUs in two BAG regions: "
                     f"hierarchical {result['hier_over_ring_at_50km']:.1f}x the ring at 50 km", fontsize=9)
        legend_below(ax, ncol=3)
