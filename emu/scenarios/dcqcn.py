"""DCQCN: two MetaRoCE flows into one port, with congestion control and without.

Two GPUs write to a third at line rate on one plane, so the leaf's port to
the receiver is 2:1 oversubscribed and marks ECN past Kmin. With DCQCN the
receiver answers marks with CNPs and the senders slow down: the flows share
the port and the queue stays below Kmax. Without it the queue sits past Kmax.
The plot shows each flow's receive rate over time and each sender's rate
cuts (from the endpoints' own samples), and the queue to the receiver over
time with and without DCQCN (sampled by the engine every 2 us of fabric time).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from emu.fidelity import combine
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.net.timebase import clock_label
from emu.roce.transport import HEADERS
from emu.scenarios.base import Scenario
from emu.scenarios.common import legend_below
from emu.topo.fpf import FPFTopo

# RED as DCQCN's paper runs it (Pmax 1 %), at this engine's 100G thresholds: marks stay rare enough
# that the faster flow collects more of them, which is what makes the flows converge.
ECN = (100_000, 400_000, 0.01)


def _rates(trace: list[tuple[float, int]], origin: float) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for (t0, b0), (t1, b1) in zip(trace, trace[1:], strict=False):
        if t1 > t0:
            xs.append((t1 - origin) * 1e6)
            ys.append((b1 - b0) * 8 / (t1 - t0) / 1e9)
    return xs, ys


def overlap_rates(rx_traces: list[list[tuple[float, int]]]) -> list[float]:
    """Each flow's receive rate (fabric b/s) while all of them were running, from the receiver's samples."""
    start, end = max(t[0][0] for t in rx_traces), min(t[-1][0] for t in rx_traces)
    out = []
    for trace in rx_traces:
        pts = [(t, b) for t, b in trace if start <= t <= end]
        out.append((pts[-1][1] - pts[0][1]) * 8 / (pts[-1][0] - pts[0][0]))
    return out

@dataclass
class Dcqcn(Scenario):
    """Two GPUs write `bytes` each to a third on one plane, with DCQCN and then without."""

    name = "dcqcn"
    headline = (
        "dcqcn.data_ok", "none.data_ok", "dcqcn.flow_rate_while_both_fabric_bps", "dcqcn.over_kmax_fraction",
        "none.over_kmax_fraction")
    default_dilation = 10000.0  # at 5000 the endpoints fell behind and the flows' share moved with D
    bmv2_lacks = "it samples queue depth over time, which only the native engine does"

    fabric_clock = True

    bytes: str = "32MiB"  # 16 MiB: the share moved 0.76-0.99 on the wall clock

    def check(self) -> None:
        self.as_size("bytes")

    def load_pps(self) -> float:
        """Two 100G MetaRoCE writers."""
        return 2 * 100e9 / ((1024 + HEADERS) * 8)

    def settings(self, settings: RunSettings) -> RunSettings:
        return settings if settings.ecn is not None else replace(settings, ecn=ECN)

    def topologies(self) -> dict[str, Any]:
        """The same fabric twice: the writers with DCQCN, then without."""
        return {cc: FPFTopo(gpus=3, planes=1, leaves=1) for cc in ("dcqcn", "none")}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        assert settings.ecn is not None
        net.engine.sample_queues([("p0l0", "p0l0-eth3")], 2e-6)
        run = net.roce.perf(["gpu0", "gpu1"], "gpu2", nbytes=self.as_size("bytes"), cc=role)
        clients, server = run.clients, run.server
        stats = net.engine.stats()
        queue = net.engine.queue_samples()["p0l0/p0l0-eth3"]
        port = stats["switches"]["p0l0"]["ports"]["p0l0-eth3"]
        busy = [q for _, q in queue]
        while busy and busy[-1] == 0:  # trailing idle samples after the transfer
            busy.pop()
        return {
            "data_ok": server["data_ok"],
            "flow_bw_fabric_bps": [c["bw_fabric_bps"] for c in clients],
            "flow_rate_while_both_fabric_bps": overlap_rates(server["rx_traces"]),
            "cnps_received": [c["cnps"] for c in clients],
            "cnps_sent": server["cnps_sent"],
            "ecn_marked": port["ecn_marked"],
            "over_kmax_fraction": port["over_kmax"][3] / max(1, port["ecn_enqueued"][3]),
            "queue_samples": len(busy),
            "time_over_kmax_fraction": sum(q >= settings.ecn[1] for q in busy) / max(1, len(busy)),
            "queue_hwm_bytes": port["queue_hwm"][3],
            "pfc_frames": port["pfc_tx"],
            "fidelity": net.verdict(frame_bytes=1024 + HEADERS, kernel_frames=run.kernel_frames,
                                    endpoints=run.endpoints),
            # For the plot: the queue over time (fabric s, bytes), each flow's receive trace and each sender's rate.
            "queue_series": [(t, b) for t, b in queue if b],
            "receive_traces": server["rx_traces"],
            "sender_rate_traces": [c["rate_trace"] for c in clients],
        }

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        return {"bytes_per_flow": self.as_size("bytes"), "kmax_bytes": settings.ecn[1] if settings.ecn else None,
                **parts, "fidelity": combine({cc: run["fidelity"] for cc, run in parts.items()})}

    def verdict(self, result: dict[str, Any]) -> bool:
        """Both runs' data right; with DCQCN the flows share within 20 % and the queue sits past Kmax less
        than half the time, without it more than half."""
        a, b = result["dcqcn"]["flow_rate_while_both_fabric_bps"]
        return (result["dcqcn"]["data_ok"] and result["none"]["data_ok"] and min(a, b) >= 0.8 * max(a, b)
                and result["dcqcn"]["over_kmax_fraction"] < 0.5 < result["none"]["over_kmax_fraction"])

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        traces = result["dcqcn"]["receive_traces"]
        origin = min(t[0][0] for t in traces if t)
        qax = ax.twinx()
        for cc, style in (("dcqcn", "-"), ("none", ":")):
            q = result[cc]["queue_series"] or [(0.0, 0)]
            t0 = q[0][0]
            qax.plot([(t - t0) * 1e6 for t, _ in q], [b / 1e3 for _, b in q], style, color="grey", linewidth=0.7,
                     label=f"queue, {cc}")
        qax.axhline(result["kmax_bytes"] / 1e3, color="red", linewidth=0.6)
        qax.set_ylabel("queue to the receiver (KB); red: Kmax")
        for i, trace in enumerate(traces):
            xs, ys = _rates(trace, origin)
            ax.plot(xs, ys, linewidth=1, label=f"flow {i} received")
        for i, rt in enumerate(result["dcqcn"]["sender_rate_traces"]):
            if rt:
                ax.step([(t - origin) * 1e6 for t, _ in rt], [r / 1e9 for _, r in rt], where="post", linestyle="--",
                        linewidth=0.8, label=f"sender {i} rate (DCQCN)")
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("Gb/s")
        ax.set_title(f"DCQCN, two flows into one 100G port ({clock_label(result)})")
        legend_below(ax, qax, ncol=3)
