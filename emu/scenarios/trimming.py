"""Trimming against PFC and plain loss: the same MetaRoCE incast on the same fabric, three ways.

`senders` GPUs write `bytes` each to one GPU at once, over an FPF plane of
two leaves, with DCQCN. The receiver's port is `senders` times
oversubscribed. Three ways:

- pfc: the RoCE class is lossless; the fabric pauses upstream.
- lossy: no PFC, no trimming; a full queue drops, and the senders find out
  from SACKs or their retransmission timers.
- trim: no PFC; a switch cuts what it would drop to a 64-byte header and
  sends it ahead (emu.dataplane.spec.TrimSpec), the receiver NACKs it at
  once and the sender resends it on the spot and takes it as a CNP.

Per way: every flow's completion time (p50, p99, max), the receiver's
goodput, pause frames, trims, drops, retransmissions and how many of those
the timer sent. The result names the way that finished the incast first
and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from emu.fidelity import combine, fabric_clock_verdict, packet_time_s
from emu.net.fabric import FabricNet
from emu.net.fidelity import fabric_fidelity
from emu.net.switch import RunSettings
from emu.roce.run import EnginePerf, PerfRun, mininet_popen
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, totals
from emu.topo.fpf import FPFTopo

WAYS = ("pfc", "lossy", "trim")
TRIM = (64, 11)  # bytes kept after the Ethernet header, the trimmed DSCP (unless --trim says otherwise)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


@dataclass
class Trimming(Scenario):
    """`senders` GPUs write `bytes` each to one GPU with congestion control `cc`, over an FPF plane of
    two leaves: with PFC, lossy, and with packet trimming."""

    name = "trimming"
    fabric_clock = True  # all its traffic is MetaRoCE's: the engine runs it, exactly

    senders: int = 8
    bytes: str = "4MiB"
    cc: str = "dcqcn"

    def check(self) -> None:
        if not 2 <= self.senders <= 31:
            raise ScenarioError(f"trimming: senders must be in 2..31, got {self.senders}")
        if self.cc not in ("dcqcn", "none"):
            raise ScenarioError(f"trimming: cc must be dcqcn or none, got {self.cc!r}")
        self.as_size("bytes")

    def load_pps(self) -> float:
        return self.senders * 100e9 / ((1024 + HEADERS) * 8)

    def topologies(self) -> dict[str, Any]:
        return {way: FPFTopo(gpus=self.senders + 1, planes=1, leaves=2) for way in WAYS}

    def role_settings(self, role: str, settings: RunSettings) -> RunSettings:
        return replace(settings, pfc=role == "pfc", trim=(settings.trim or TRIM) if role == "trim" else None)

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        nbytes, fabric = self.as_size("bytes"), settings.clock == "fabric"
        senders = [f"gpu{i}" for i in range(1, self.senders + 1)]
        trim_dscp = settings.trim[1] if settings.trim else None
        if fabric:
            run = EnginePerf(net.engine, [net.host_planes(s) for s in senders], net.host_planes("gpu0"),
                             nbytes=nbytes, cc=self.cc, lat_iters=0, trim_dscp=trim_dscp)
            clients, server = run.wait()
        else:
            clients, server = PerfRun([mininet_popen(net.get(s)) for s in senders], mininet_popen(net.get("gpu0")),
                                      nbytes=nbytes, dilation=settings.dilation, cc=self.cc, lat_iters=0,
                                      trim_dscp=trim_dscp).wait()
        stats = net.engine.stats()
        t = totals(stats)
        fct = [c["fabric_s"] for c in clients]
        return {
            "data_ok": server["data_ok"],
            "fct_fabric_s": {"p50": _pct(fct, 0.5), "p99": _pct(fct, 0.99), "max": max(fct)},
            "fct_by_flow_fabric_s": fct,
            "goodput_fabric_bps": nbytes * len(clients) * 8 / max(fct),
            "pfc_frames": t["pfc_frames"],
            "trims": sum(sum(p.get("trimmed", [])) for sw in stats["switches"].values() for p in sw["ports"].values()),
            "drops_by_reason": t["drops_by_reason"],
            "retransmits": sum(c["retransmits"] for c in clients),
            "timeouts": sum(c["timeouts"] for c in clients),
            "trim_nacks": sum(c["trim_nacks"] for c in clients),
            "cnps": sum(c["cnps"] for c in clients),
            "fidelity": (fabric_clock_verdict(packet_s=packet_time_s(100e9, 1024 + HEADERS),
                                              kernel_frames=run.kernel_frames) if fabric
                         else fabric_fidelity(stats, frame_bytes=1024 + HEADERS, endpoints=[*clients, server])),
        }

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        done = {way: parts[way]["fct_fabric_s"]["max"] for way in WAYS}
        first = min(done, key=lambda w: done[w])
        second = min((w for w in WAYS if w != first), key=lambda w: done[w])
        return {"senders": self.senders, "bytes_per_flow": self.as_size("bytes"), "cc": self.cc,
                "trim_size_bytes": (settings.trim or TRIM)[0], "trim_dscp": (settings.trim or TRIM)[1], **parts,
                "incast_first": first, "incast_margin_fabric_s": done[second] - done[first],
                "incast_margin_fraction": (done[second] - done[first]) / done[second],
                "fidelity": combine({way: run["fidelity"] for way, run in parts.items()})}

    def verdict(self, result: dict[str, Any]) -> bool:
        """Every way's data right; with trimming, packets were cut, no pause frame was sent, every cut was
        NACKed, and no retransmission timer fired unless a packet was dropped uncut (BMv2 drops in its
        traffic manager, before egress can cut: docs/p4.md)."""
        trim = result["trim"]
        return (all(result[w]["data_ok"] for w in WAYS) and trim["trims"] > 0 and trim["pfc_frames"] == 0
                and trim["trim_nacks"] == trim["trims"] and (trim["timeouts"] == 0 or bool(trim["drops_by_reason"])))

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        xs = range(len(WAYS))
        for k, (stat, colour) in enumerate((("p50", "tab:blue"), ("p99", "tab:orange"), ("max", "tab:red"))):
            ax.bar([x + (k - 1) * 0.25 for x in xs], [result[w]["fct_fabric_s"][stat] * 1e6 for w in WAYS], 0.25,
                   label=f"completion {stat}", color=colour)
        for x, w in zip(xs, WAYS, strict=True):
            r = result[w]
            ax.text(x, r["fct_fabric_s"]["max"] * 1e6 * 1.02,
                    f"pauses {r['pfc_frames']}\ntrims {r['trims']}\ntimeouts {r['timeouts']}", ha="center",
                    fontsize=7)
        ax.set_ylim(0, max(result[w]["fct_fabric_s"]["max"] for w in WAYS) * 1e6 * 1.3)
        ax.set_xticks(list(xs), ["PFC (lossless)", "lossy", "trimming"])
        ax.set_ylabel("flow completion (fabric us)")
        clock = "fabric clock" if result.get("clock") == "fabric" else f"D={result['dilation']:g}"
        ax.set_title(f"{result['senders']}:1 MetaRoCE incast, {result['cc']}: {result['incast_first']} first by "
                     f"{result['incast_margin_fabric_s'] * 1e6:.0f} us ({clock})", fontsize=9)
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
