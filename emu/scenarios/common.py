"""What scenarios share: the lossless class's marks, fabric-wide counters, results on disk. (Their UDP
flows are emu.net.flows', started with `net.traffic(...)`.)"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

HEADERS = 42  # Ethernet + IPv4 + UDP
ECT0 = 0b10
DSCP_LOSSLESS = 26


class ScenarioError(ValueError):
    """A scenario parameter is impossible, or the experiment could not run; the message says which."""


def totals(stats: dict[str, Any], lossless: tuple[int, ...] = (3,)) -> dict[str, Any]:
    """Fabric-wide sums of the engine's counters."""
    t: dict[str, Any] = {"drops_lossless": 0, "pfc_frames": 0, "ecn_marked": 0, "paused_fabric_s": 0.0,
                         "queue_hwm_bytes": 0, "drops_by_reason": {}}
    # .get: a BMv2 fabric counts what its P4 program and its MACs (the engine's wire boxes) count;
    # drops inside simple_switch's queues are inferred from its counters, per switch ("p4_queue").
    for sw in stats["switches"].values():
        if sw.get("queue_drops"):  # BMv2: inside simple_switch, of no known class
            t["drops_by_reason"]["p4_queue"] = t["drops_by_reason"].get("p4_queue", 0) + sw["queue_drops"]
        for port in sw["ports"].values():
            for reason, n in port.get("drops", {}).items():
                t["drops_by_reason"][reason] = t["drops_by_reason"].get(reason, 0) + n
            t["drops_lossless"] += sum(port.get("drops_tc", [0] * 8)[tc] for tc in lossless)
            t["pfc_frames"] += port.get("pfc_tx", 0)
            t["ecn_marked"] += port.get("ecn_marked", 0)
            t["paused_fabric_s"] += sum(port.get("paused_s", [])) + sum(port.get("host_nic", {}).get("paused_s", []))
            t["queue_hwm_bytes"] = max(t["queue_hwm_bytes"], max(port.get("queue_hwm", [0])))
    return t



def save(out_dir: str, name: str, result: dict[str, Any], draw: Callable[[Any], None] | None) -> dict[str, Any]:
    """Write NAME.json and, if there is a `draw(ax)`, NAME.png; the result gains the plot's path."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    if draw is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        draw(ax)
        fig.tight_layout()
        fig.savefig(base + ".png", dpi=100)
        plt.close(fig)
        result["plot"] = base + ".png"
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    return result


def legend_below(ax: Any, *others: Any, ncol: int = 4) -> None:
    """One legend for `ax` (and twin axes `others`), under the plot: never over the data."""
    handles, labels = [], []
    for a in (ax, *others):
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    # Under the x label (lower still under a log axis: its tick labels are taller, 10 to a power).
    below = (-0.17 if ax.get_xscale() == "log" else -0.13) if ax.get_xlabel() else -0.06
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, below),
              ncol=min(ncol, len(labels)) or 1, fontsize=7, frameon=False)


def rate_series(got: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    """Per source: (fabric time in us, received Gb/s) from a receiver's bins (emu.net.flows: fabric units)."""
    bin_s = got["bin_s"]
    out = {}
    for src, bins in got["bins"].items():
        ks = sorted(int(k) for k in bins)
        out[src] = ([k * bin_s * 1e6 for k in ks], [bins[str(k)] * 8 / bin_s / 1e9 for k in ks])
    return out


def long_haul_bytes(net: Any) -> int:
    """Bytes sent so far over the links between BAG switches of different regions (bagRxG), both ways:
    what a collective put on the long-haul fibre."""
    stats = net.stats()
    total = 0
    for link in net.links:
        a, b = link.intf1, link.intf2
        if a.node.name.startswith("bag") and b.node.name.startswith("bag") and a.node.name[3] != b.node.name[3]:
            total += stats.port(a.node.name, a.name).tx_bytes + stats.port(b.node.name, b.name).tx_bytes
    return total
