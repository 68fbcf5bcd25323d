"""Congestion spreading: PFC's pauses reach flows that never touched the hot port.

"Getting it wrong risks congestion spreading well beyond the link that
caused it" (the seed on lossless fabrics). One FPF plane of three leaves:
`senders` GPUs of leaf 1 write `bytes` each to gpu0 on leaf 0 (the hot
port), while `victims` GPUs of leaf 2 write `bytes` each to other GPUs of
leaf 0. The victims share the spines' links into leaf 0 with the incast,
but not the hot port, and leaf 2 carries no hot traffic at all.

Three ways on the same fabric: PFC alone (no congestion control), PFC with
DCQCN, and trimming with DCQCN (no PFC). Per way: the victims' rates, the
incast's completion, and the pause tree: every port that sent pause frames,
whom it paused, how many frames and for how long, read from the engine's
counters at both ends of each link. The plot draws the tree over the
topology.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.run import EngineWrites
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError
from emu.scenarios.dcqcn import ECN
from emu.topo.fpf import FPFTopo

WAYS = ("pfc", "pfc+dcqcn", "trim+dcqcn")
TRIM = (64, 11)
FALLS = 0.5  # a victim "falls measurably" below this fraction of its line rate


@dataclass
class CongestionSpreading(Scenario):
    """`senders` GPUs of leaf 1 write `bytes` each to gpu0 on leaf 0 while `victims` GPUs of leaf 2 write
    `bytes` each to other GPUs of leaf 0, over an FPF plane of three leaves and `spines` spines: with PFC
    alone, PFC and DCQCN, and trimming and DCQCN."""

    name = "congestion-spreading"
    headline = (
        "pfc.victim_rates_fabric_bps", "pfc.victim_second_half_rates_fabric_bps",
        "pfc+dcqcn.victim_second_half_rates_fabric_bps", "paused_switches_without_hot_traffic")
    fabric_clock = True  # all its traffic is MetaRoCE's: the engine runs it, exactly
    wall_clock = False  # its endpoints (many pairs at once, replicas) are written for the fabric clock's jobs

    senders: int = 6
    victims: int = 2
    bytes: str = "4MiB"  # DCQCN needs a few hundred microseconds to converge: at 1 MiB it has not
    spines: int = 2

    def check(self) -> None:
        if not 2 <= self.senders <= 16 or not 1 <= self.victims <= 8 or not 1 <= self.spines <= 8:
            raise ScenarioError("congestion-spreading: senders must be 2..16, victims 1..8, spines 1..8")
        self.as_size("bytes")

    @property
    def per_leaf(self) -> int:
        return max(self.senders, self.victims + 1)

    def load_pps(self) -> float:
        return (self.senders + self.victims) * 100e9 / ((1024 + HEADERS) * 8)

    def topologies(self) -> dict[str, Any]:
        return {way: FPFTopo(gpus=3 * self.per_leaf, planes=1, leaves=3, spines=self.spines) for way in WAYS}

    def settings(self, settings: RunSettings) -> RunSettings:
        """DCQCN's marking as the dcqcn scenario tunes it (Pmax 1 %), unless --ecn says otherwise."""
        return settings if settings.ecn is not None else replace(settings, ecn=ECN)

    def role_settings(self, role: str, settings: RunSettings) -> RunSettings:
        trim = role.startswith("trim")
        return replace(settings, pfc=not trim, trim=(settings.trim or TRIM) if trim else None)

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        n = self.per_leaf
        hot = [(f"gpu{n + i}", "gpu0") for i in range(self.senders)]
        victims = [(f"gpu{2 * n + j}", f"gpu{1 + j}") for j in range(self.victims)]
        pairs = hot + victims
        planes = {h: net.host_planes(h) for pair in pairs for h in pair}
        run = EngineWrites(net.engine, planes, pairs, nbytes=self.as_size("bytes"),
                           cc="none" if role == "pfc" else "dcqcn",
                           trim_dscp=settings.trim[1] if settings.trim else None)
        done = run.wait()
        stats = net.engine.stats()
        by = {(p["src"], p["dst"]): p for p in done}
        return {
            "data_ok": all(p["data_ok"] for p in done),
            "incast_fct_max_fabric_s": max(by[p]["client"]["fabric_s"] for p in hot),
            "victim_rates_fabric_bps": [by[p]["client"]["bw_fabric_bps"] for p in victims],
            "victim_second_half_rates_fabric_bps": [second_half_rate(by[p]["client"]) for p in victims],
            "victim_line_rate_bps": planes[victims[0][0]][0][3],
            "retransmits": sum(p["client"]["retransmits"] for p in done),
            "timeouts": sum(p["client"]["timeouts"] for p in done),
            "pause_tree": pause_tree(net, stats),
            "fidelity": net.verdict(rate_bps=100e9, frame_bytes=1024 + HEADERS,
                                    kernel_frames=run.kernel_frames),
        }

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        n = self.per_leaf
        hot_switches = {"p0l0", "p0l1", *(f"p0s{s}" for s in range(self.spines))}
        pfc = parts["pfc"]
        reached = sorted({e["paused"] for e in pfc["pause_tree"]})
        return {"senders": self.senders, "victims": self.victims, "bytes_per_flow": self.as_size("bytes"),
                "hot_port": "p0l0 -> gpu0", "victim_hosts": [f"gpu{2 * n + j}" for j in range(self.victims)],
                "hot_senders": [f"gpu{n + i}" for i in range(self.senders)],
                "victim_receivers": [f"gpu{1 + j}" for j in range(self.victims)],
                "switches_with_hot_traffic": sorted(hot_switches), **parts,
                "paused_nodes_pfc": reached,
                "paused_switches_without_hot_traffic": [x for x in reached if x.startswith("p") and x not in hot_switches],
                "victim_falls_below_fraction": FALLS,
                "fidelity": combine({way: run["fidelity"] for way, run in parts.items()})}

    def verdict(self, result: dict[str, Any]) -> bool:
        """With PFC alone a victim falls below half its line rate and the pauses reach a switch that carries
        no hot traffic; with DCQCN (PFC kept) the victims recover: once DCQCN has converged (the second
        half of their bytes) the slowest does better than under PFC alone, and fewer pauses are sent."""
        pfc, dcqcn = result["pfc"], result["pfc+dcqcn"]
        line = pfc["victim_line_rate_bps"]

        def frames(way: dict[str, Any]) -> int:
            return sum(e["frames"] for e in way["pause_tree"])

        return (all(result[w]["data_ok"] for w in WAYS) and min(pfc["victim_rates_fabric_bps"]) < FALLS * line
                and bool(result["paused_switches_without_hot_traffic"])
                and min(dcqcn["victim_second_half_rates_fabric_bps"]) > min(pfc["victim_second_half_rates_fabric_bps"])
                and frames(dcqcn) < frames(pfc))

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        tree = result["pfc"]["pause_tree"]
        nodes = sorted({e["paused"] for e in tree} | {e["pauser"] for e in tree} | {"p0l2"}
                       | set(result["switches_with_hot_traffic"]) | set(result["victim_hosts"]) | {"gpu0"}
                       | set(result["hot_senders"]) | set(result["victim_receivers"]))
        spines = [x for x in nodes if x.startswith("p0s")]
        leaves = [f"p0l{i}" for i in range(3)]
        pos = {s: (1 + 2 * i, 3.0) for i, s in enumerate(spines)}
        pos.update({leaf: (2.0 * i + 0.5, 2.0) for i, leaf in enumerate(leaves)})
        hosts = [x for x in nodes if x.startswith("gpu")]
        per = self.per_leaf
        for h in hosts:
            g = int(h[3:])
            leaf, slot = divmod(g, per)
            pos[h] = (2.0 * leaf + 0.5 + (slot - (per - 1) / 2) * 0.22, 1.0)
        for s in spines:
            for leaf in leaves:
                ax.plot(*zip(pos[s], pos[leaf], strict=True), color="lightgrey", linewidth=0.8, zorder=1)
        for h in hosts:
            leaf = f"p0l{int(h[3:]) // per}"
            ax.plot(*zip(pos[h], pos[leaf], strict=True), color="lightgrey", linewidth=0.8, zorder=1)
        longest = max((e["paused_fabric_s"] for e in tree), default=0.0) or 1.0
        for e in tree:
            if e["pauser"] in pos and e["paused"] in pos:
                (x0, y0), (x1, y1) = pos[e["pauser"]], pos[e["paused"]]
                ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=2,
                            arrowprops={"arrowstyle": "->", "color": "tab:red",
                                        "lw": 0.8 + 3 * e["paused_fabric_s"] / longest})
        for name, (x, y) in pos.items():
            hot = name in result["switches_with_hot_traffic"] or name in result["hot_senders"] or name == "gpu0"
            ax.scatter([x], [y], s=120 if name.startswith("p") else 40, zorder=3,
                       color="tab:orange" if hot else ("tab:blue" if name in result["victim_hosts"] else "grey"))
            ax.text(x, y - 0.22 if name.startswith("gpu") else y + 0.12, name, ha="center", fontsize=6)
        rates = ", ".join(f"{w} {min(result[w]['victim_rates_fabric_bps']) / 1e9:.0f} "
                          f"({min(result[w]['victim_second_half_rates_fabric_bps']) / 1e9:.0f})" for w in WAYS)
        ax.set_title(f"PFC alone: who paused whom (red; width: time paused); orange carries the incast, blue the "
                     f"victims\nslowest victim, Gb/s (its second half): {rates}", fontsize=7)
        ax.set_ylim(0.5, 3.4)
        ax.set_axis_off()


def second_half_rate(client: dict[str, Any]) -> float:
    """A writer's rate over the second half of its bytes (fabric b/s), from its own samples of what it
    sent: where a congestion control that converged has let it recover."""
    trace = [(t, sum(b)) for t, b in client["plane_trace"]]
    half = trace[-1][1] / 2
    t_half = next(t for t, b in trace if b >= half)
    return (trace[-1][1] - half) * 8 / (trace[-1][0] - t_half) if trace[-1][0] > t_half else 0.0


def pause_tree(net: FabricNet, stats: dict[str, Any]) -> list[dict[str, Any]]:
    """Every port that sent pause frames: the switch and port that sent them (`pauser`), the node they
    paused (a switch, or a host's NIC), how many, and how long the paused side held (fabric s)."""
    out = []
    for link in net.links:
        for a, b in ((link.intf1, link.intf2), (link.intf2, link.intf1)):
            port = stats["switches"].get(a.node.name, {}).get("ports", {}).get(a.name)
            if not port or not port.get("pfc_tx"):
                continue
            peer = stats["switches"].get(b.node.name, {}).get("ports", {}).get(b.name)
            held = peer["paused_s"] if peer else port.get("host_nic", {}).get("paused_s", [])
            out.append({"pauser": a.node.name, "port": a.name, "paused": b.node.name, "frames": port["pfc_tx"],
                        "paused_fabric_s": sum(held)})
    return sorted(out, key=lambda e: -e["paused_fabric_s"])
