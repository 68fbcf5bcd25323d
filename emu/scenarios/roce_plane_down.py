"""A plane fails under a MetaRoCE transfer: the host steers around it.

GPU 0 writes to GPU 1 sprayed over every plane. Part-way through, every
switch of one plane fails. The sender sees that plane's packets go
unacknowledged, retransmits them on the others, stops giving it new packets,
and keeps probing it; the transfer completes with the right data. The plot
shows bytes sent per plane over time, from the sender's own samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.net.timebase import clock_label
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below
from emu.topo.fpf import FPFTopo


@dataclass
class RocePlaneDown(Scenario):
    """GPU 0 writes `bytes` to GPU 1 over `planes` planes; plane `fail` fails 40 % into its share."""

    name = "roce-plane-down"
    headline = ("data_ok", "failed_plane_marked_down", "data_packets_on_failed_plane_after_detection", "retransmits")
    fabric_clock = True  # all the measured traffic is the project's own: the engine runs it, exactly

    planes: int = 4
    bytes: str = "16MiB"
    fail: int = 2

    def check(self) -> None:
        if self.planes < 2 or not 0 <= self.fail < self.planes:
            raise ScenarioError(f"roce-plane-down: needs 2+ planes and a failed plane in 0..{self.planes - 1}")
        self.as_size("bytes")

    def load_pps(self) -> float:
        """One MetaRoCE writer spraying 100G planes."""
        return self.planes * 100e9 / ((1024 + HEADERS) * 8)

    def topology(self) -> FPFTopo:
        return FPFTopo(gpus=2, planes=self.planes, leaves=1)

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        nbytes, failed = self.as_size("bytes"), self.fail
        # The plane fails 40 % into its share: on the fabric clock the engine does it at the fabric time
        # that takes at line rate (nothing outside it can act while the write runs).
        w = net.roce.write("gpu0", "gpu1", nbytes=nbytes, fail_plane=(failed, 0.4))
        client, server, failed_at = w.client, w.server, w.failed_at_fabric_s
        fidelity = net.verdict(rate_bps=net.host_planes("gpu0")[failed][3], frame_bytes=1024 + HEADERS,
                               kernel_frames=w.kernel_frames, endpoints=[client, server])
        p = client["planes"][failed]
        return {
            "planes": self.planes,
            "failed_plane": failed,
            "data_ok": server["data_ok"],
            "bw_fabric_bps": client["bw_fabric_bps"],
            "retransmits": client["retransmits"],
            "failed_plane_marked_down": not p["healthy"],
            "data_packets_on_failed_plane_after_detection": p["tx_after_down"],
            "probes_on_failed_plane": p["probes"],
            "bytes_by_plane": [q["tx_bytes"] for q in client["planes"]],
            "failed_at_fabric_s": failed_at,  # on the sender's trace's clock ((monotonic - epoch) / D)
            "plane_trace": client["plane_trace"],  # (fabric s, bytes sent per plane so far)
            "fidelity": fidelity,
        }

    def verdict(self, result: dict[str, Any]) -> bool:
        """The data arrived right, the failed plane was marked down and given no data after."""
        return (result["data_ok"] and result["failed_plane_marked_down"]
                and result["data_packets_on_failed_plane_after_detection"] == 0)

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        trace, failed = result["plane_trace"], result["failed_plane"]
        if len(trace) < 2:
            return
        origin = trace[0][0]
        for k in range(result["planes"]):
            xs, ys = [], []
            for (t0, b0), (t1, b1) in zip(trace, trace[1:], strict=False):
                if t1 > t0:
                    xs.append((t1 - origin) * 1e6)
                    ys.append((b1[k] - b0[k]) * 8 / (t1 - t0) / 1e9)
            ax.plot(xs, ys, linewidth=1, label=f"plane {k}" + (" (fails)" if k == failed else ""))
        ax.axvline((result["failed_at_fabric_s"] - origin) * 1e6, color="k", linestyle="--", linewidth=0.8)
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("sent on plane (Gb/s)")
        ax.set_title(f"MetaRoCE steers around failed plane {failed} ({clock_label(result)})")
        legend_below(ax)
