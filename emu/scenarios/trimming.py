"""Trimming against PFC and plain loss: the same traffic on the same fabric, three ways.

An FPF plane of two leaves, MetaRoCE with DCQCN. Two patterns:

- incast: `senders` GPUs of leaf 1 write `bytes` each to gpu0 on leaf 0,
  and beside them `victims` GPUs of leaf 1 write to other GPUs of leaf 0:
  the victims share the spines and the spine-to-leaf links with the incast,
  but not the hot port (gpu0's);
- permutation: every GPU writes `bytes` to the GPU in the same slot of the
  other leaf, all at once (every flow crosses the spines; ECMP collisions
  make the hot spots).

Three ways: pfc (the RoCE class lossless, the fabric pauses upstream),
lossy (no PFC, no trimming: a full queue drops, the senders find out from
SACKs or their timers) and trim (no PFC; a switch cuts what it would drop
to a 64-byte header sent ahead, emu.dataplane.spec.TrimSpec; the receiver
NACKs it at once, the sender resends it on the spot and takes it as a CNP).

Per way and pattern: every flow's completion (p50, p99, max), the victims'
rate, pause frames, cuts, drops, retransmissions and how many of those a
timer sent. The result names the way that finished the incast first and by
how much. On BMv2 only the incast's writers run, without victims: writes
between many pairs at once are the engine's own (on its switches, either
clock), and on BMv2 each writer is a process in its host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.net.timebase import clock_label
from emu.roce.run import EngineWrites
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below, totals
from emu.topo.fpf import FPFTopo

WAYS = ("pfc", "lossy", "trim")
TRIM = (64, 11)  # bytes kept after the Ethernet header, the trimmed DSCP (unless --trim says otherwise)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _fct(times: list[float]) -> dict[str, float]:
    return {"p50": _pct(times, 0.5), "p99": _pct(times, 0.99), "max": max(times)}


def _counters(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the fabric did between two stats: pauses, cuts, drops by reason."""
    a, b = totals(before), totals(after)

    def cut(stats: dict[str, Any]) -> int:
        return sum(sum(p.get("trimmed", [])) for sw in stats["switches"].values() for p in sw["ports"].values())

    return {"pfc_frames": b["pfc_frames"] - a["pfc_frames"], "trims": cut(after) - cut(before),
            "drops_by_reason": {r: n - a["drops_by_reason"].get(r, 0) for r, n in b["drops_by_reason"].items()
                                if n > a["drops_by_reason"].get(r, 0)}}


def _senders(clients: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(c[k] for c in clients) for k in ("retransmits", "timeouts", "trim_nacks", "cnps")}


@dataclass
class Trimming(Scenario):
    """`senders` GPUs write `bytes` each to one GPU, `victims` more write beside them to other GPUs, then
    every GPU writes to one on the other leaf; with congestion control `cc`, over an FPF plane of two
    leaves: with PFC, lossy, and with packet trimming."""

    name = "trimming"
    headline = (
        "pfc.data_ok", "lossy.data_ok", "trim.data_ok", "trim.incast.trims", "trim.incast.trim_nacks",
        "trim.incast.pfc_frames", "trim.incast.timeouts")
    fabric_clock = True  # all its traffic is MetaRoCE's: the engine runs it, exactly

    senders: int = 8
    victims: int = 2
    bytes: str = "4MiB"
    cc: str = "dcqcn"
    buffer: str = "128KiB"  # shared buffer per switch port: shallow, so that an incast overflows it

    def check(self) -> None:
        if not 2 <= self.senders <= 24 or not 0 <= self.victims <= 8:
            raise ScenarioError(f"trimming: senders must be in 2..24 and victims in 0..8, got {self.senders}, "
                                f"{self.victims}")
        if self.cc not in ("dcqcn", "none"):
            raise ScenarioError(f"trimming: cc must be dcqcn or none, got {self.cc!r}")
        self.as_size("bytes")
        if not 16 << 10 <= self.as_size("buffer") <= 64 << 20:
            raise ScenarioError(f"trimming: buffer must be 16KiB..64MiB a port, got {self.buffer}")

    @property
    def per_leaf(self) -> int:
        return self.senders + self.victims

    def load_pps(self) -> float:
        return 2 * self.per_leaf * 100e9 / ((1024 + HEADERS) * 8)

    def topologies(self) -> dict[str, Any]:
        return {way: FPFTopo(gpus=2 * self.per_leaf, planes=1, leaves=2) for way in WAYS}

    def settings(self, settings: RunSettings) -> RunSettings:
        return replace(settings, buffer_per_port=self.as_size("buffer"))

    def role_settings(self, role: str, settings: RunSettings) -> RunSettings:
        return replace(settings, pfc=role == "pfc", trim=(settings.trim or TRIM) if role == "trim" else None)

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        nbytes, n = self.as_size("bytes"), self.per_leaf
        trim_dscp = settings.trim[1] if settings.trim else None
        hot = [(f"gpu{n + i}", "gpu0") for i in range(self.senders)]
        if not net.timebase.endpoints_inside():
            # As the hosts' own processes (BMv2), a host's port 4791 holds one endpoint: many pairs at once (a
            # host both writing and written to) are the engine's. The incast's writers write to one server.
            before = net.engine.stats()
            run = net.roce.perf([a for a, _ in hot], "gpu0", nbytes=nbytes, cc=self.cc)
            after = net.engine.stats()
            return {"data_ok": run.server["data_ok"],
                    "incast": {"fct_fabric_s": _fct([c["fabric_s"] for c in run.clients]),
                               **_counters(before, after), **_senders(run.clients)},
                    "fidelity": net.verdict(frame_bytes=1024 + HEADERS, endpoints=run.endpoints)}
        victims = [(f"gpu{n + self.senders + j}", f"gpu{1 + j}") for j in range(self.victims)]
        permutation = [(f"gpu{i}", f"gpu{(i + n) % (2 * n)}") for i in range(2 * n)]
        planes = {h.name: net.host_planes(h.name) for h in net.hosts}
        out: dict[str, Any] = {"data_ok": True}
        kernel = 0
        for pattern, pairs in (("incast", hot + victims), ("permutation", permutation)):
            before = net.engine.stats()
            run = EngineWrites(net.engine, {h: planes[h] for pair in pairs for h in pair}, pairs, nbytes=nbytes,
                               cc=self.cc, trim_dscp=trim_dscp)
            done = run.wait()
            kernel += run.kernel_frames
            after = net.engine.stats()
            out["data_ok"] = out["data_ok"] and all(p["data_ok"] for p in done)
            flows = [p for p in done if (p["src"], p["dst"]) not in victims]
            out[pattern] = {"fct_fabric_s": _fct([p["client"]["fabric_s"] for p in flows]),
                            **_counters(before, after), **_senders([p["client"] for p in done])}
            if pattern == "incast":
                out[pattern]["victim_rates_fabric_bps"] = [p["client"]["bw_fabric_bps"] for p in done
                                                           if (p["src"], p["dst"]) in victims]
        out["fidelity"] = net.verdict(rate_bps=100e9, frame_bytes=1024 + HEADERS, kernel_frames=kernel)
        return out

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        done = {way: parts[way]["incast"]["fct_fabric_s"]["max"] for way in WAYS}
        first = min(done, key=lambda w: done[w])
        second = min((w for w in WAYS if w != first), key=lambda w: done[w])
        return {"senders": self.senders, "victims": self.victims, "bytes_per_flow": self.as_size("bytes"),
                "cc": self.cc, "trim_size_bytes": (settings.trim or TRIM)[0], "trim_dscp": (settings.trim or TRIM)[1],
                **parts, "incast_first": first, "incast_margin_fabric_s": done[second] - done[first],
                "incast_margin_fraction": (done[second] - done[first]) / done[second],
                "fidelity": combine({way: run["fidelity"] for way, run in parts.items()})}

    def verdict(self, result: dict[str, Any]) -> bool:
        """Every way's data right; with trimming, packets were cut and NACKed (a cut whose packet had
        already arrived whole is not), no pause frame was sent, and no retransmission timer fired unless a
        packet was dropped uncut (BMv2 drops in its traffic manager, before egress can cut: docs/p4.md)."""
        ok = all(result[w]["data_ok"] for w in WAYS)
        for pattern in ("incast", "permutation"):
            t = result["trim"].get(pattern)
            if t is None:
                continue
            ok = ok and t["pfc_frames"] == 0 and t["trim_nacks"] <= t["trims"] and (
                t["timeouts"] == 0 or bool(t["drops_by_reason"]))
        return ok and result["trim"]["incast"]["trims"] > 0 and result["trim"]["incast"]["trim_nacks"] > 0

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        xs = range(len(WAYS))
        for k, (stat, colour) in enumerate((("p50", "tab:blue"), ("p99", "tab:orange"), ("max", "tab:red"))):
            ax.bar([x + (k - 1) * 0.25 for x in xs], [result[w]["incast"]["fct_fabric_s"][stat] * 1e6 for w in WAYS],
                   0.25, label=f"incast completion {stat}", color=colour)
        top = max(result[w]["incast"]["fct_fabric_s"]["max"] for w in WAYS) * 1e6
        for x, w in zip(xs, WAYS, strict=True):
            r = result[w]["incast"]
            victims = r.get("victim_rates_fabric_bps") or []
            lines = [f"pauses {r['pfc_frames']}", f"cuts {r['trims']}", f"timers {r['timeouts']}"]
            if victims:
                lines.append(f"victims {min(victims) / 1e9:.0f} Gb/s")
            if "permutation" in result[w]:
                lines.append(f"perm. max {result[w]['permutation']['fct_fabric_s']['max'] * 1e6:.0f} us")
            ax.text(x, top * 1.03, "\n".join(lines), ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, top * 1.5)
        ax.set_xticks(list(xs), ["PFC (lossless)", "lossy", "trimming"])
        ax.set_ylabel("incast flow completion (fabric us)")
        ax.set_title(f"{result['senders']}:1 MetaRoCE incast, {result['cc']}: {result['incast_first']} first by "
                     f"{result['incast_margin_fabric_s'] * 1e6:.0f} us ({clock_label(result)})", fontsize=9)
        legend_below(ax, ncol=3)
