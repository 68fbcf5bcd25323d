"""Incast: N GPUs send to one GPU at once in the lossless class.

The receiver's leaf port is N times oversubscribed. With PFC the fabric
pauses upstream, hop by hop back to the senders' NICs, and loses nothing;
without it the same traffic overflows the buffer. The result counts bytes
offered and delivered, lossless drops, PFC frames and ECN marks, read from
the engine's counters, and plots what the receiver got from each sender.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.net.fabric import FabricNet
from emu.net.flows import Flow
from emu.net.switch import RunSettings
from emu.net.timebase import clock_label
from emu.scenarios.base import Scenario
from emu.scenarios.common import (
    DSCP_LOSSLESS,
    ECT0,
    ScenarioError,
    rate_series,
    totals,
)
from emu.topo.fpf import FPFTopo

PORT = 9000


@dataclass
class Incast(Scenario):
    """`senders` GPUs each send `bytes` at `rate` in `size`-byte datagrams to one GPU, in the lossless
    class, over an FPF plane of `leaves` leaves and `spines` spines."""

    name = "incast"
    fabric_clock = True  # the engine can run its UDP flows itself (emu.traffic.job), exactly
    default_dilation = 10000.0  # keeps 7 line-rate senders within one Python worker's budget

    senders: int = 7
    bytes: str = "1MiB"
    size: int = 1400
    rate: str = "100G"
    leaves: int = 2
    spines: int = 2

    def check(self) -> None:
        if not 1 <= self.senders <= 63:
            raise ScenarioError(f"incast: senders must be in 1..63, got {self.senders}")
        if not 64 <= self.size <= 1458 or self.as_size("bytes") < self.size:
            raise ScenarioError("incast: datagram size must be in 64..1458 and bytes at least one datagram")
        self.as_rate("rate")

    def load_pps(self) -> float:
        return self.senders * self.as_rate("rate") / ((self.size + 42) * 8)

    def settings(self, settings: RunSettings) -> RunSettings:
        if settings.backend == "bmv2" and settings.pfc and settings.links == "netem":
            raise ScenarioError("incast on BMv2 with PFC needs --links engine (or auto): netem honours no pause "
                                "frame, the engine is each BMv2 port's MAC")
        return settings

    def topology(self) -> FPFTopo:
        gpus = self.senders + 1
        return FPFTopo(gpus=gpus, planes=1, leaves=min(self.leaves, gpus), spines=self.spines,
                       rate=f"{self.as_rate('rate'):g}")

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        rate = self.as_rate("rate")
        dst = net.get("gpu0").IP()
        flows = [Flow(f"gpu{i}", "gpu0", dst, PORT, self.as_size("bytes"), rate, size=self.size,
                      tos=DSCP_LOSSLESS << 2 | ECT0) for i in range(1, self.senders + 1)]
        traffic = net.traffic(flows)
        sent, got = traffic.wait()
        stats = net.engine.stats()
        rx = got[("gpu0", PORT, False)]
        delivered = rx["received_bytes"]
        planned = sum(f.wire_bytes for f in flows)  # from the parameters: a send that failed still counts
        t = totals(stats)
        return {
            "pfc": settings.pfc,
            "senders": self.senders,
            "link_rate_bps": rate,
            "planned_bytes": planned,
            "offered_bytes": sum(s["sent_bytes"] for s in sent),
            "send_errors": sum(s["errors"] for s in sent),
            "delivered_bytes": delivered,
            "lost_bytes": planned - delivered,
            **t,
            "drops_host_nic": t["drops_by_reason"].get("host_nic_overflow", 0),
            "drops_socket": t["drops_by_reason"].get("rx_socket_overflow", 0),
            "receive_fabric_s": rx["duration_s"],
            "goodput_fabric_bps": delivered * 8 / rx["duration_s"] if rx["duration_s"] else 0.0,
            "received_series": rate_series(rx),  # per sender: fabric us, Gb/s
            "fidelity": net.verdict(rate_bps=rate, frame_bytes=self.size + 42, kernel_frames=traffic.kernel_frames,
                                    senders=sent),
        }

    def verdict(self, result: dict[str, Any]) -> bool | None:
        """With PFC: nothing lost, and pauses were sent. Without it the scenario only shows the loss."""
        if not result["pfc"]:
            return None
        return result["drops_lossless"] == 0 and result["pfc_frames"] > 0 and \
            result["delivered_bytes"] == result["planned_bytes"]

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        for src, (xs, ys) in sorted(result["received_series"].items()):
            ax.plot(xs, ys, label=src, linewidth=1)
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("received from sender (Gb/s)")
        ax.set_title(f"Incast {self.senders}:1, PFC {'on' if result['pfc'] else 'off'} ({clock_label(result)})")
        ax.legend(fontsize=7, ncol=2)

    def file_name(self, settings: RunSettings) -> str:
        return f"incast-{'pfc' if settings.pfc else 'nopfc'}"
