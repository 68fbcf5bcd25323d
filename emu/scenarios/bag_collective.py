"""The BAG latency cliff: the same allreduce within one building and across buildings.

The seeds' claim: BAG joins buildings and regions into one training fabric,
but the long-haul links between them are tens of kilometres of fibre, so a
collective that crosses them pays their round trip on every step, and one
that stays in a building does not. Two runs of the same ring allreduce
(same hosts per ring, same sizes, same link rates) over MetaRoCE: four hosts
in one building, then two hosts in each of two regions joined by BAG
switches over `distance` of fibre. Time and busbw side by side; every run's
fidelity verdict is part of the result (at auto D unless --dilation is given).
"""

from __future__ import annotations

from typing import Any

from emu.bench import collective
from emu.fidelity import combine
from emu.net.switch import RunSettings
from emu.scenarios.common import ScenarioError, only, save
from emu.units import UnitError, format_size, parse_distance, parse_size

AUTO_DILATION = True


def run(params: dict[str, str], settings: RunSettings, out_dir: str, *, auto: bool = True) -> dict[str, Any]:
    only(params, {"distance", "size", "hosts"}, "bag-collective")
    distance = params.get("distance", "20km")
    try:
        meters = parse_distance(distance)
        size = parse_size(params.get("size", "1MiB"))
    except UnitError as exc:
        raise ScenarioError(f"bag-collective: {exc}") from None
    hosts = int(params.get("hosts", "1"))
    if meters <= 0 or hosts < 1 or size < 1024:
        raise ScenarioError("bag-collective: distance > 0, hosts per building >= 1, size >= 1KiB")
    common = {"topo": "bag", "sizes": str(size), "leaves": "1", "spines": "1", "rate": "400G",
              "fabric_rate": "400G", "bag_rates": "400G"}
    d: float | str = "auto" if auto else settings.dilation
    within = collective.run("allreduce", {**common, "regions": "1", "hosts_per_leaf": str(2 * hosts)}, dilation=d,
                            settings=settings)
    across = collective.run("allreduce", {**common, "regions": "2", "hosts_per_leaf": str(hosts), "distance": distance},
                            dilation=d, settings=settings)
    w, a = within["rows"][0], across["rows"][0]

    def side(r: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        return {"time_us": row["time_us"], "busbw_GBps": row["busbw_GBps"], "busbw_of_bound": row["busbw_of_bound"],
                "wrong": row["wrong"], "dilation": r["dilation"], "fidelity": r["fidelity"]}

    result = {"scenario": "bag-collective", "op": "allreduce", "size": w["size"], "ranks": 2 * hosts,
              "distance_m": meters, "within_building": side(within, w), "across_buildings": side(across, a),
              "time_ratio": a["time_us"] / w["time_us"],
              "fidelity": combine({"within": within["fidelity"], "across": across["fidelity"]})}
    result["passed"] = bool(w["wrong"] == a["wrong"] == 0 and result["time_ratio"] >= 2
                            and result["fidelity"]["ok"])

    def draw(ax: Any) -> None:
        labels = ["within one building", f"across buildings ({meters / 1000:g} km)"]
        ax.bar([0, 1], [w["time_us"], a["time_us"]], 0.5, color=["tab:blue", "tab:red"])
        ax.set_xticks([0, 1], labels)
        ax.set_ylabel("allreduce time (us, fabric)")
        for i, row in enumerate((w, a)):
            ax.annotate(f"{row['time_us']:.0f} us\nbusbw {row['busbw_GBps']:.1f} GB/s", (i, row["time_us"]),
                        ha="center", va="bottom")
        ax.set_title(f"BAG: allreduce of {format_size(w['size'])} over {2 * hosts} GPUs, MetaRoCE")
        ax.set_ylim(0, a["time_us"] * 1.3)

    return save(out_dir, "bag-collective", result, draw)
