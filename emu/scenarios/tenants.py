"""Two training jobs on one FPF: each on planes of its own, then both on every plane.

Two tenants, each an allreduce over four GPUs whose ring crosses between the
two leaves at every hop, start at the same fabric instant. Given planes of
their own (tenant A planes 0 and 1, tenant B planes 2 and 3) they share no
switch and no link, and each gives the figures it gives alone, bit for bit.
Given every plane, each can use twice the bandwidth, but their cross-leaf
flows now meet on the same uplinks, hashed by ECMP: each is slower than it is
alone on the same planes, by what the other costs it. Every arrangement is
built fresh, so every job starts at the same fabric instant (the fabric
clock's figures are then comparable to the bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.collectives.run import Tenant
from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below
from emu.topo.fpf import FPFTopo
from emu.units import format_size

A = ("gpu0", "gpu4", "gpu1", "gpu5")  # every ring hop from one leaf to the other
B = ("gpu2", "gpu6", "gpu3", "gpu7")
ARRANGEMENTS = {"own": ((0, 1), (2, 3)), "shared": (None, None)}  # each tenant's planes


@dataclass
class Tenants(Scenario):
    """Two allreduces of `size` on FPF 8 GPUs x 4 planes (2 leaves, 2 spines a plane), alone and
    together, with planes of their own and on every plane."""

    name = "tenants"
    headline = ("own_planes.same_as_alone", "shared_planes.slowdown", "wrong")
    fabric_clock = True  # both jobs inside the engine: exact, and started at one instant
    wall_clock = False  # its claim is bit for bit (alone and together on planes of their own): the fabric clock's

    size: str = "1MiB"
    uplink: str = ""  # the leaves' uplink rate (default: non-blocking)

    def check(self) -> None:
        if self.as_size("size") < 4096:
            raise ScenarioError("tenants: size must be at least 4KiB")

    def load_pps(self) -> float:
        return 8 * 4 * 100e9 / ((1024 + HEADERS) * 8)

    def topologies(self) -> dict[str, Any]:
        topo = {"gpus": 8, "planes": 4, "leaves": 2, "spines": 2, **({"uplink": self.uplink} if self.uplink else {})}
        return {f"{where}-{who}": FPFTopo(**topo) for where in ARRANGEMENTS for who in ("a", "b", "both")}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        where, who = role.split("-")
        planes = ARRANGEMENTS[where]
        tenants = {"a": Tenant("allreduce", A, (self.as_size("size"),), planes=planes[0]),
                   "b": Tenant("allreduce", B, (self.as_size("size"),), planes=planes[1])}
        picked = [tenants[w] for w in ("a", "b") if who in (w, "both")]
        return {"jobs": [r.report for r in net.collectives(*picked)]}

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        out: dict[str, Any] = {"size": self.as_size("size"), "tenants": {"a": list(A), "b": list(B)}}
        verdicts = {}
        for where in ARRANGEMENTS:
            alone = [parts[f"{where}-a"]["jobs"][0], parts[f"{where}-b"]["jobs"][0]]
            both = parts[f"{where}-both"]["jobs"]
            key = "own_planes" if where == "own" else "shared_planes"
            out[key] = {
                "planes": {"a": ARRANGEMENTS[where][0], "b": ARRANGEMENTS[where][1]},
                "alone_us": [j["rows"][0]["time_us"] for j in alone],
                "together_us": [j["rows"][0]["time_us"] for j in both],
                "busbw_together_GBps": [j["rows"][0]["busbw_GBps"] for j in both],
                "same_as_alone": all(x["rows"] == y["rows"] for x, y in zip(alone, both, strict=True)),
                "slowdown": max(y["rows"][0]["time_us"] / x["rows"][0]["time_us"]
                                for x, y in zip(alone, both, strict=True)),
            }
            for i, j in enumerate(alone + both):
                verdicts[f"{where}-{i}"] = j["fidelity"]
        out["wrong"] = sum(j["wrong"] for p in parts.values() for j in p["jobs"])
        out["fidelity"] = combine(verdicts)
        return out

    def verdict(self, result: dict[str, Any]) -> bool:
        """Planes of their own isolate the jobs to the bit; shared planes cost each something."""
        return (result["wrong"] == 0 and result["own_planes"]["same_as_alone"]
                and result["shared_planes"]["slowdown"] > 1.05 and bool(result["fidelity"]["ok"]))

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        groups = [("own planes", result["own_planes"]), ("every plane", result["shared_planes"])]
        x = 0.0
        ticks, labels = [], []
        for name, g in groups:
            for i, who in enumerate("AB"):
                ax.bar(x, g["alone_us"][i], 0.35, color="tab:blue", label="alone" if x == 0 else None)
                ax.bar(x + 0.35, g["together_us"][i], 0.35, color="tab:red", label="together" if x == 0 else None)
                ticks.append(x + 0.175)
                labels.append(f"{who}, {name}")
                x += 1.0
        ax.set_xticks(ticks, labels)
        ax.set_ylabel("allreduce time (us, fabric)")
        ax.set_title(f"Two tenants' allreduce of {format_size(result['size'])} on FPF 8 x 4: "
                     f"slowdown on shared planes x{result['shared_planes']['slowdown']:.2f}", fontsize=9)
        legend_below(ax, ncol=2)
