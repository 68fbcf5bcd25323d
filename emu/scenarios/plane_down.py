"""Plane down: one FPF plane fails under load; the other planes carry on.

GPU 0 streams to GPU 1 on every plane at line rate (one flow per plane, as
a NIC spraying over its ports would). Part-way through, every switch of one
plane fails. The receiver's per-plane byte counts and rates over time show
the failed plane stop and the others deliver everything, undisturbed.
Steering the failed plane's share onto the others is the host transport's
job (MetaRoCE); kernel UDP, as here, simply loses that plane's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.net.fabric import FabricNet
from emu.net.flows import Flow
from emu.net.switch import RunSettings
from emu.net.timebase import clock_label
from emu.scenarios.base import Scenario
from emu.scenarios.common import HEADERS, ScenarioError, legend_below
from emu.topo.fpf import FPFTopo

PORT = 9200


@dataclass
class PlaneDown(Scenario):
    """GPU 0 sends `bytes` per plane to GPU 1 over `planes` planes at `rate`; plane `fail` fails when
    its flow is `at` (a fraction) of the way through."""

    name = "plane-down"
    headline = (
        "failed_plane", "others_complete", "failed_plane_lost_bytes", "delivered_bytes_by_plane",
        "delivered_after_failure_by_plane")
    fabric_clock = True  # the engine runs its UDP flows and fails the plane at a fabric time, exactly

    planes: int = 4
    bytes: str = "1MiB"
    rate: str = "100G"
    fail: int = 1
    at: float = 0.4

    def check(self) -> None:
        if not 0 <= self.fail < self.planes or self.planes < 2:
            raise ScenarioError(f"plane-down: needs 2+ planes and a failed plane in 0..{self.planes - 1}")
        if not 0 < self.at < 1:
            raise ScenarioError("plane-down: `at` is the fraction of the transfer at which the plane fails, in (0, 1)")
        self.as_size("bytes")

    def load_pps(self) -> float:
        """One line-rate flow per plane."""
        return self.planes * self.as_rate("rate") / (1442 * 8)

    def topology(self) -> FPFTopo:
        return FPFTopo(gpus=2, planes=self.planes, leaves=1, rate=f"{self.as_rate('rate'):g}")

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        nbytes, rate, failed = self.as_size("bytes"), self.as_rate("rate"), self.fail
        flows = [Flow("gpu0", "gpu1", f"10.{p}.0.3", PORT, nbytes, rate) for p in range(self.planes)]
        # The plane fails when its flow is `at` through (on the fabric clock at the fabric time that takes
        # at line rate, done by the engine), and is restored after.
        traffic = net.traffic(flows, fail_plane=(failed, self.at))
        sent, got = traffic.wait()
        fidelity = net.verdict(rate_bps=rate, frame_bytes=flows[0].size + HEADERS, kernel_frames=traffic.kernel_frames,
                               senders=sent)
        rx = got[("gpu1", PORT, False)]
        planes = range(self.planes)
        by_plane = {p: rx["by_source"].get(f"10.{p}.0.2", 0) for p in planes}
        offered = {p: s["sent_bytes"] for p, s in enumerate(sent)}
        # Judged against what the parameters planned: a send the kernel refused is not "not offered".
        planned = {p: flows[p].wire_bytes for p in planes}
        bin_s = rx["bin_s"]
        fail_after = (traffic.failed_at_s or 0.0) - (rx["first_s"] or 0.0)  # both on the receiver's clock
        after_fail = {p: sum(v for k, v in rx["bins"].get(f"10.{p}.0.2", {}).items() if int(k) * bin_s > fail_after)
                      for p in planes}
        series = {}
        for p in planes:  # received per plane over time: fabric us, Gb/s
            bins = rx["bins"].get(f"10.{p}.0.2", {})
            ks = sorted(int(k) for k in bins)
            series[p] = ([k * bin_s * 1e6 for k in ks], [bins[str(k)] * 8 / bin_s / 1e9 for k in ks])
        others = [p for p in planes if p != failed]
        return {
            "planes": self.planes,
            "failed_plane": failed,
            "failed_at_fabric_s": fail_after,
            "planned_bytes_by_plane": planned,
            "offered_bytes_by_plane": offered,
            "delivered_bytes_by_plane": by_plane,
            "delivered_after_failure_by_plane": after_fail,
            "others_complete": all(by_plane[p] == planned[p] for p in others),
            "failed_plane_lost_bytes": planned[failed] - by_plane[failed],
            "received_series": series,
            "fidelity": fidelity,
        }

    def verdict(self, result: dict[str, Any]) -> bool:
        """The other planes delivered everything, and went on delivering after the failure; the failed one lost."""
        after = result["delivered_after_failure_by_plane"]
        return result["others_complete"] and result["failed_plane_lost_bytes"] > 0 and all(
            after[p] > 0 for p in after if p != result["failed_plane"])

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        """Each plane's delivered share of what it was to carry, over fabric time: the failed plane stops
        where it failed, the others go on to the whole of theirs."""
        failed = result["failed_plane"]
        for p, (xs, ys) in sorted(result["received_series"].items(), key=lambda kv: int(kv[0])):
            planned = {str(k): v for k, v in result["planned_bytes_by_plane"].items()}[str(p)]
            done, got = [0.0], 0.0
            width = min((b - a for a, b in zip(xs, xs[1:], strict=False)), default=1.0)  # us a bin
            for y in ys:
                got += y * 1e9 / 8 * width * 1e-6
                done.append(100 * got / planned)
            lost = int(p) == failed
            ax.step([0.0, *xs], done, where="post", linewidth=2.2 if lost else 1.2, color="black" if lost else None,
                    linestyle="-" if lost else "--", label=f"plane {p}" + (" (fails)" if lost else ""))
        at = result["failed_at_fabric_s"] * 1e6
        ax.axvline(at, color="tab:red", linestyle=":", linewidth=1)
        ax.text(at, 102, f" plane {failed} fails", color="tab:red", fontsize=7, va="bottom")
        ax.set_ylim(0, 112)
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("delivered, % of the plane's bytes")
        ax.set_title(f"FPF plane {failed} fails under load ({clock_label(result)})")
        legend_below(ax)
