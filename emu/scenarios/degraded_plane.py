"""A degraded plane: MetaRoCE's spraying weighted by each plane's health.

"Load balancing also has to reason about paths that are degraded rather
than simply down" (the seeds). Eight FPF planes; one of them, in turn,
loses `loss` of its frames, runs at `rate`, or takes `delay` more on each
cable. On each, a MetaRoCE write (GPU 0 to GPU 1) and an allreduce over
every GPU, three ways:

- equal: every live plane gets the same share of the packets;
- weighted: each plane's share follows its measured health (its round trip
  against the fastest plane's, its queueing against the typical plane's,
  its losses: the rule is `emu.roce.transport.Device._reweigh`);
- down: the plane is failed outright, and the senders stop using it.

Then the plane heals in the middle of a weighted write (at a fabric time,
by the engine), and the scenario reads from the sender's own samples how
long the plane takes to carry its share again. Everything runs inside the
engine on the fabric clock: exact figures, no D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.run import EnginePerf
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below
from emu.topo.fpf import FPFTopo

WAYS = ("equal", "weighted", "down")
FAULTS = ("loss", "rate", "delay")
SHARE = 0.9  # a healed plane "carries its share" once it sends at this fraction of the others' mean
HEAL_BOUND_S = 100e-6  # the verdict's bound on that time (fabric s)
LOSS_KEEP = 0.99  # with loss alone, weighting keeps the plane: within 1 % of equal spraying


@dataclass
class DegradedPlane(Scenario):
    """GPU 0 writes `bytes` to GPU 1, and `gpus` GPUs allreduce `allreduce` bytes, over `planes` planes of
    which plane `plane` loses `loss` of its frames, or runs at `rate`, or takes `delay` more per cable:
    equal spraying, health-weighted spraying, the plane failed; then it heals under a weighted write."""

    name = "degraded-plane"
    headline = (
        "loss.equal.write.goodput_fabric_bps", "loss.weighted.write.goodput_fabric_bps",
        "rate.equal.write.goodput_fabric_bps", "rate.weighted.write.goodput_fabric_bps",
        "delay.equal.write.goodput_fabric_bps", "delay.weighted.write.goodput_fabric_bps",
        "rate.heal.back_to_share_after_fabric_s", "delay.heal.back_to_share_after_fabric_s")
    fabric_clock = True  # all its traffic is MetaRoCE's: the engine runs it, exactly
    wall_clock = False  # its endpoints (many pairs at once, replicas) are written for the fabric clock's jobs

    planes: int = 8
    plane: int = 3
    gpus: int = 4
    bytes: str = "16MiB"
    allreduce: str = "4MiB"
    loss: float = 0.01
    rate: str = "25G"
    delay: str = "5us"

    def check(self) -> None:
        if not 2 <= self.planes <= 8 or not 0 <= self.plane < self.planes or not 2 <= self.gpus <= 16:
            raise ScenarioError(f"degraded-plane: planes must be 2..8, plane 0..{self.planes - 1}, gpus 2..16")
        if not 0 < self.loss < 0.5:
            raise ScenarioError(f"degraded-plane: loss is a fraction in (0, 0.5), got {self.loss}")
        self.as_size("bytes")
        self.as_size("allreduce")
        if not 0 < self.rate_bps < 100e9:
            raise ScenarioError(f"degraded-plane: rate must be below the planes' 100G, got {self.rate}")
        if self.delay_s <= 0:
            raise ScenarioError(f"degraded-plane: delay must be positive, got {self.delay}")

    @property
    def rate_bps(self) -> float:
        return self.as_rate("rate")

    @property
    def delay_s(self) -> float:
        return self.as_time("delay")

    def load_pps(self) -> float:
        return self.planes * 100e9 / ((1024 + HEADERS) * 8)

    def topology(self) -> FPFTopo:
        return FPFTopo(gpus=self.gpus, planes=self.planes, leaves=1)

    def _degrade(self, net: FabricNet, fault: str) -> None:
        if fault == "loss":
            net.degrade(plane=self.plane, loss=self.loss)
        elif fault == "rate":
            net.degrade(plane=self.plane, rate=self.rate_bps)
        else:
            net.degrade(plane=self.plane, delay=self.delay_s)

    def _write(self, net: FabricNet, spray: str, heal_after_s: float | None = None) -> dict[str, Any]:
        events = [] if heal_after_s is None else [(heal_after_s, True, net.plane_ports(self.plane))]
        run = EnginePerf(net.engine, net.host_planes("gpu0"), net.host_planes("gpu1"), nbytes=self.as_size("bytes"),
                         lat_iters=0, port_events=events, spray=spray)
        client, server = run.wait()
        p = client["planes"][self.plane]
        out = {"goodput_fabric_bps": client["bw_fabric_bps"], "fabric_s": client["fabric_s"],
               "data_ok": bool(server["data_ok"]), "retransmits": client["retransmits"],
               "timeouts": client["timeouts"], "packets_on_plane": p["tx_packets"],
               "packets": sum(q["tx_packets"] for q in client["planes"]), "weight_at_end": p["weight"],
               "kernel_frames": run.kernel_frames}
        if heal_after_s is not None:
            out["healed_at_fabric_s"] = run.t0_fabric_s + heal_after_s
            out["plane_trace"] = client["plane_trace"]
        return out

    def _allreduce(self, net: FabricNet, spray: str) -> dict[str, Any]:
        r = net.collective("allreduce", sizes=[self.allreduce], spray=spray)
        row = r.rows[-1]
        return {"time_us": row.time_us, "busbw_GBps": row.busbw_GBps, "wrong": r.wrong,
                "retransmits": r.report.get("retransmits", 0), "fidelity_ok": bool(r.fidelity.get("ok"))}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        kernel = 0
        clean = {"write": self._write(net, "weighted"), "allreduce": self._allreduce(net, "weighted")}
        kernel += clean["write"]["kernel_frames"]
        faults: dict[str, Any] = {}
        for fault in FAULTS:
            ways: dict[str, Any] = {}
            for way in WAYS:
                if way == "down":
                    net.fail(plane=self.plane)
                else:
                    self._degrade(net, fault)
                try:
                    ways[way] = {"write": self._write(net, "weighted" if way == "down" else way),
                                 "allreduce": self._allreduce(net, "weighted" if way == "down" else way)}
                finally:
                    net.restore(plane=self.plane)
                kernel += ways[way]["write"]["kernel_frames"]
            # The plane heals a third of the way into a weighted write's clean duration.
            self._degrade(net, fault)
            try:
                heal = self._write(net, "weighted", heal_after_s=clean["write"]["fabric_s"] / 3)
            finally:
                net.restore(plane=self.plane)
            kernel += heal["kernel_frames"]
            heal["back_to_share_after_fabric_s"] = back_to_share(heal["plane_trace"], self.plane,
                                                                 heal["healed_at_fabric_s"])
            faults[fault] = {**ways, "heal": heal}
        return {"clean": clean, **faults,
                "fidelity": net.verdict(rate_bps=100e9, frame_bytes=1024 + HEADERS, kernel_frames=kernel)}

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        run = parts["fabric"]
        return {"planes": self.planes, "degraded_plane": self.plane, "gpus": self.gpus,
                "write_bytes": self.as_size("bytes"), "allreduce_bytes": self.as_size("allreduce"),
                "rate_bps": self.rate_bps, "delay_per_cable_s": self.delay_s,
                "share_fraction": SHARE, "heal_bound_fabric_s": HEAL_BOUND_S, **run}

    def verdict(self, result: dict[str, Any]) -> bool:
        """Every byte right; weighted spraying beats equal spraying on the write's goodput when the plane
        is slow or long, and is within 1 % of it when the plane only loses (it keeps the plane, by its
        rule); no allreduce gets a wrong element; a healed plane carries its share again within
        HEAL_BOUND_S."""
        ok = all(w["write"]["data_ok"] and w["allreduce"]["wrong"] == 0
                 for f in FAULTS for k, w in result[f].items() if k != "heal")

        def goodput(fault: str, way: str) -> float:
            return result[fault][way]["write"]["goodput_fabric_bps"]

        heals = [result[f]["heal"]["back_to_share_after_fabric_s"] for f in ("rate", "delay")]
        return (ok and goodput("rate", "weighted") > goodput("rate", "equal")
                and goodput("delay", "weighted") > goodput("delay", "equal")
                and goodput("loss", "weighted") >= LOSS_KEEP * goodput("loss", "equal")
                and all(h is not None and h <= HEAL_BOUND_S for h in heals))

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        width = 0.25
        for i, way in enumerate(WAYS):
            xs = [k + (i - 1) * width for k in range(len(FAULTS))]
            ax.bar(xs, [result[f][way]["write"]["goodput_fabric_bps"] / 1e9 for f in FAULTS], width, label=way)
        ax.axhline(result["clean"]["write"]["goodput_fabric_bps"] / 1e9, color="k", linestyle="--", linewidth=0.8,
                   label="no fault")
        ax.set_xticks(range(len(FAULTS)))
        ax.set_xticklabels([f"{result['parameters']['loss']:.0%} loss", f"{result['rate_bps'] / 1e9:g}G",
                            f"+{result['delay_per_cable_s'] * 1e6:g} us/cable"])
        ax.set_ylabel("write goodput (Gb/s, fabric)")
        heal = ", ".join(f"{f} {fmt_us(result[f]['heal']['back_to_share_after_fabric_s'])}" for f in FAULTS)
        ax.set_title(f"plane {result['degraded_plane']} of {result['planes']} degraded: MetaRoCE spraying\n"
                     f"healed plane back to its share after: {heal}", fontsize=8)
        legend_below(ax)


def fmt_us(s: float | None) -> str:
    return "never" if s is None else f"{s * 1e6:.0f} us"


def back_to_share(trace: list[Any], plane: int, healed_at: float) -> float | None:
    """How long after `healed_at` (fabric s) the plane first sends, over one sampling interval of the
    sender's trace [(fabric s, bytes sent per plane so far)], at least SHARE of the other planes' mean
    rate; None if it never does before the write ends."""
    for (t0, b0), (t1, b1) in zip(trace, trace[1:], strict=False):
        if t0 < healed_at or t1 <= t0:
            continue
        mine = b1[plane] - b0[plane]
        others = [b1[k] - b0[k] for k in range(len(b1)) if k != plane]
        if others and mine >= SHARE * sum(others) / len(others):
            return t1 - healed_at
    return None
