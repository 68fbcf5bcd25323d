"""The distance cliff: one allreduce across two BAG regions, ring, tree and hierarchical, as the fibre
between the regions grows from 2 km to 500 km.

The seeds' claims: collective libraries pick an algorithm without knowing
distance, and a ring that crosses a long link pays its latency again and again
(its pipeline hides some of its 2(n-1) steps: about five crossings here), a
cliff in busbw as the regions move apart; an algorithm
that knows where the long links are (reduce-scatter inside each region, an
allreduce of each shard across, allgather inside) crosses them in two steps
and carries fewer bytes over them, and keeps collective traffic off BAG. Each
distance is a fabric of its own (two regions of `hosts` GPUs, 400G
everywhere); the three algorithms run on it in turn, inside the engine, with
the data checked. Reported: time and busbw against distance, and the bytes
each algorithm put on the long-haul links.

At `size` the time is the long link's latency (the ring crosses it at several
of its sequential steps, hier at three), so hier's margin there is larger than
its bytes. Where BAG's bandwidth decides, the margin is the bytes': a second
fabric at 50 km joins the regions by one link of `bag_rate`, narrower than the
regions (a BAG oversubscribed, as it is against the GPUs of whole buildings),
and runs `bw_size` with DCQCN (a sender at 400G into it is otherwise held by
PFC for milliseconds). Reported: each algorithm's time, its bytes over BAG and
how busy it kept the link, and hier's margin against the bytes' ratio.
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
NARROW = "50km-narrow"  # the role of the fabric whose BAG is narrower than its regions


@dataclass
class DistanceCliff(Scenario):
    """An allreduce of `size` over two regions of `hosts` GPUs each, at each of `distances` of fibre
    between them, with the ring, NCCL's double binary tree and the hierarchical algorithm."""

    name = "distance-cliff"
    headline = ("hier_over_ring_at_50km", "ring_slowdown_2_to_500km", "hier_slowdown_2_to_500km",
                "hier_over_ring_narrow", "bytes_ring_over_hier_narrow", "wrong")
    fabric_clock = True  # the ranks run inside the engine: exact at any distance
    wall_clock = False  # 500 km of fibre at a D a wall clock could keep would take hours

    size: str = "1MiB"
    hosts: int = 4
    distances: str = "2km,10km,50km,200km,500km"
    bw_size: str = "16MiB"
    bag_rate: str = "5G"

    def check(self) -> None:
        if self.hosts < 1 or self.as_size("size") < 4096 or self.as_size("bw_size") < 4096:
            raise ScenarioError("distance-cliff: hosts per region >= 1, size and bw_size >= 4KiB")
        if self.as_rate("bag_rate") <= 0:
            raise ScenarioError("distance-cliff: bag_rate > 0")
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
        narrow = {**common, "bags": 1, "bag_rates": self.bag_rate}
        return {**{d: BAGTopo(distance=d, **common) for d in self.distances.split(",")},
                NARROW: BAGTopo(distance="50km", **narrow)}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        size, cc = (self.as_size("bw_size"), "dcqcn") if role == NARROW else (self.as_size("size"), "none")
        out = {}
        for algo in ALGOS:
            before = long_haul_bytes(net)
            r = net.collective("allreduce", sizes=[size], algo=algo, cc=cc).report
            out[algo] = {"time_us": r["rows"][0]["time_us"], "busbw_GBps": r["rows"][0]["busbw_GBps"],
                         "wrong": r["wrong"], "long_haul_bytes": long_haul_bytes(net) - before,
                         "retransmits": r["retransmits"], "fidelity": r["fidelity"]}
            if role == NARROW:  # each way's bytes over the time the link had, at its rate
                out[algo]["bag_busy"] = (out[algo]["long_haul_bytes"] / 2 * 8
                                         / (r["rows"][0]["time_us"] * 1e-6 * self.as_rate("bag_rate")))
        return out

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        narrow = parts[NARROW]
        rows = [{"distance": d, "distance_m": parse_distance(d), **{a: parts[d][a] for a in ALGOS}}
                for d in parts if d != NARROW]
        first, last = rows[0], rows[-1]
        at50 = next(r for r in rows if r["distance"] == "50km")
        return {"size": self.as_size("size"), "ranks": 2 * self.hosts, "rows": rows,
                "narrow": {"size": self.as_size("bw_size"), "bag_rate_bps": self.as_rate("bag_rate"), "cc": "dcqcn",
                           "distance": "50km", **narrow},
                "hier_over_ring_narrow": narrow["ring"]["time_us"] / narrow["hier"]["time_us"],
                "bytes_ring_over_hier_narrow": narrow["ring"]["long_haul_bytes"] / max(1, narrow["hier"]["long_haul_bytes"]),
                "hier_over_ring_at_50km": at50["ring"]["time_us"] / at50["hier"]["time_us"],
                "long_haul_bytes_ring_over_hier": at50["ring"]["long_haul_bytes"] / max(1, at50["hier"]["long_haul_bytes"]),
                "ring_slowdown_2_to_500km": last["ring"]["time_us"] / first["ring"]["time_us"],
                "hier_slowdown_2_to_500km": last["hier"]["time_us"] / first["hier"]["time_us"],
                "wrong": sum(r[a]["wrong"] for r in rows for a in ALGOS) + sum(narrow[a]["wrong"] for a in ALGOS),
                "fidelity": combine({**{f"{r['distance']}-{a}": r[a]["fidelity"] for r in rows for a in ALGOS},
                                     **{f"{NARROW}-{a}": narrow[a]["fidelity"] for a in ALGOS}})}

    def verdict(self, result: dict[str, Any]) -> bool:
        """The data right everywhere; at 50 km the hierarchical algorithm is faster than the ring, and
        from the nearest distance to the farthest the ring loses more than it does; where BAG's bandwidth
        decides, hier's margin is its bytes' (their ratio within 10 %: what is left is each one's latency)."""
        bytes_margin = result["bytes_ring_over_hier_narrow"]
        return (result["wrong"] == 0 and result["hier_over_ring_at_50km"] > 1.0
                and result["ring_slowdown_2_to_500km"] > result["hier_slowdown_2_to_500km"]
                and abs(result["hier_over_ring_narrow"] / bytes_margin - 1) <= 0.1
                and bool(result["fidelity"]["ok"]))

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        km = [r["distance_m"] / 1000 for r in result["rows"]]
        first, narrow = result["rows"][0], result["narrow"]
        for algo, colour in zip(ALGOS, ("tab:red", "tab:green", "tab:blue"), strict=True):
            ax.plot(km, [r[algo]["busbw_GBps"] for r in result["rows"]], "o-", color=colour,
                    label=f"{algo} ({format_size(first[algo]['long_haul_bytes'])} over BAG at {first['distance']})")
            ax.plot([50], [narrow[algo]["busbw_GBps"]], "s", color=colour, mfc="none", ms=9,
                    label=f"{algo}, {format_size(narrow['size'])}, BAG {narrow['bag_rate_bps'] / 1e9:g}G: "
                          f"{format_size(narrow[algo]['long_haul_bytes'])}, busy {narrow[algo]['bag_busy']:.0%}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("fibre between the regions (km)")
        ax.set_ylabel("busbw (GB/s, fabric)")
        ax.set_title(f"Allreduce over {result['ranks']} GPUs in two BAG regions. {format_size(result['size'])}: hier "
                     f"{result['hier_over_ring_at_50km']:.2f}x the ring at 50 km (latency);\nBAG narrower, "
                     f"{format_size(narrow['size'])} (squares): hier {result['hier_over_ring_narrow']:.2f}x, "
                     f"its BAG bytes {result['bytes_ring_over_hier_narrow']:.2f}x fewer", fontsize=9)
        legend_below(ax, ncol=2)
