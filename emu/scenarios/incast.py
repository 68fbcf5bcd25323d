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

from emu.dataplane.spec import QosSpec
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
from emu.units import WIRE_OVERHEAD_BYTES

PORT = 9000
SAMPLE_S = 1e-6  # fabric seconds between samples of the hot port's queue and the senders' pauses
PLOT_BIN_US = 10.0  # the receive-rate panel's bins: a sender's share over a few of its datagrams


@dataclass
class Incast(Scenario):
    """`senders` GPUs each send `bytes` at `rate` in `size`-byte datagrams to one GPU, in the lossless
    class, over an FPF plane of `leaves` leaves and `spines` spines."""

    name = "incast"
    headline = (
        "delivered_bytes", "planned_bytes", "drops_lossless", "pfc_frames", "paused_fabric_s", "queue_hwm_bytes",
        "goodput_fabric_bps")
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
        # For the plot: the hot port's queue, and how long PFC held each sender (at its first hop), over time.
        hot = tuple(net.host_planes("gpu0")[0][:2])
        access = [tuple(net.host_planes(f.src)[0][:2]) for f in flows]
        sampled = net.engine.samples_ports  # not BMv2's: its plot has the receive panel only
        if sampled:
            net.engine.sample_queues([hot, *access], SAMPLE_S)
        traffic = net.traffic(flows)
        sent, got = traffic.wait()
        stats = net.engine.stats()
        rx = got[("gpu0", PORT, False)]
        story = (_story(net.engine.port_samples(), "/".join(hot), ["/".join(a) for a in access], rx["first_s"] or 0.0,
                        rx["duration_s"]) if sampled else {"queue_series": [], "held_series": []})
        delivered = rx["received_bytes"]
        planned = sum(f.wire_bytes for f in flows)  # from the parameters: a send that failed still counts
        xoff = _xoff_queue(net, stats, hot, settings) if settings.pfc and sampled else None  # the engine's buffer
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
            # The most the hot port can deliver: its line rate less each datagram's headers, FCS, preamble, gap.
            "goodput_bound_bps": rate * self.size / (self.size + 42 + WIRE_OVERHEAD_BYTES),
            **({"xoff_queue_bytes": xoff[0], "xoff_ingress_ports": xoff[1]} if xoff else {}),
            "received_series": rate_series(rx),  # per sender: fabric us, Gb/s
            "bin_us": rx["bin_s"] * 1e6,
            "hot_port": "/".join(hot),
            **story,
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
        """The story in two panels over one fabric-time axis: above, what the receiver got, each sender's
        share stacked under the line rate; below, the hot port's queue, on bands where PFC held senders."""
        plot_incast(result, ax, f"Incast {result['senders']}:1, PFC {'on' if result['pfc'] else 'off'} "
                                f"({clock_label(result)})")

    def file_name(self, settings: RunSettings) -> str:
        return f"incast-{'pfc' if settings.pfc else 'nopfc'}"


def _xoff_queue(net: FabricNet, stats: dict[str, Any], hot: tuple[str, str], settings: RunSettings
                ) -> tuple[int, int]:
    """Where the shared-buffer model says PFC starts pausing (emu.dataplane.buffer): the k ingress ports
    of the hot switch that carried the incast each hold their reserve plus the dynamic threshold, a
    2^-shift share of what is left free, x = F / (2^shift + k), F the switch's shared pool
    (buffer_per_port x ports); the hot queue is what they hold, k (reserve + x). (The hot queue's depth
    in bytes, k.)"""
    switch, port = hot
    ports = stats["switches"][switch]["ports"]
    carried = {name: p.get("rx_bytes", 0) for name, p in ports.items() if name != port}
    total = sum(carried.values()) or 1
    k = sum(1 for b in carried.values() if b > 0.05 * total)
    qos = QosSpec()
    pool = settings.buffer_per_port * len(ports)
    return k * (qos.reserve + pool // ((1 << qos.alpha_shift) + k)), k


def _story(samples: dict[str, list[tuple[float, int, float]]], hot: str, access: list[str], first_s: float,
           duration_s: float) -> dict[str, Any]:
    """From the port samples: the hot port's queue (fabric us since the first byte arrived, bytes) and the
    share of senders PFC held in each sample interval (the same us, 0..1), over the receive's span."""
    def since(t: float) -> float:
        return (t - first_s) * 1e6

    end = first_s + duration_s
    queue = [(since(t), q) for t, q, _ in samples[hot] if first_s <= t <= end]
    held: list[tuple[float, float]] = []
    series = [samples[a] for a in access]
    for k in range(1, min(len(s) for s in series)):
        t0, t1 = series[0][k - 1][0], series[0][k][0]
        if t1 < first_s or t0 > end or t1 <= t0:
            continue
        share = sum(s[k][2] - s[k - 1][2] for s in series) / (len(series) * (t1 - t0))
        held.append((since(t1), min(1.0, max(0.0, share))))
    return {"queue_series": queue, "held_series": held}


def plot_incast(result: dict[str, Any], ax: Any, title: str) -> None:
    """Draws on `ax` and on a panel made below it (the figure is the scenario's own)."""
    from mpl_toolkits.axes_grid1 import make_axes_locatable

    ax.figure.set_size_inches(8, 6.5)
    below = make_axes_locatable(ax).append_axes("bottom", size="80%", pad=0.15, sharex=ax)
    line = result["link_rate_bps"] / 1e9
    width = result["bin_us"]
    group = max(1, round(PLOT_BIN_US / width))
    series = sorted(result["received_series"].items())
    last = max((xs[-1] for _, (xs, _) in series if xs), default=0.0)
    nbins = int(last / (width * group)) + 1
    edges = [i * width * group for i in range(nbins)]
    shares = []
    for _, (xs, ys) in series:  # each sender's Gb/s averaged over PLOT_BIN_US (a bin it sent nothing in is 0)
        acc = [0.0] * nbins
        for x, y in zip(xs, ys, strict=True):  # x is a whole number of receive bins (k x bin, in floats)
            acc[min(nbins - 1, round(x / width) // group)] += y / group
        shares.append(acc)
    ax.stackplot(edges, shares, step="post", labels=[src for src, _ in series], alpha=0.85, linewidth=0)
    ax.axhline(line, color="black", linestyle="--", linewidth=1)
    ax.text(0, line * 1.02, f"line rate {line:g} Gb/s", fontsize=7, va="bottom")
    if result.get("goodput_bound_bps"):
        bound = result["goodput_bound_bps"] / 1e9
        ax.axhline(bound, color="black", linestyle=":", linewidth=1)
        ax.text(edges[-1] if edges else 0, line * 1.02, f"dotted: goodput bound {bound:.1f} Gb/s (less headers, gaps)",
                fontsize=7, va="bottom", ha="right")
    ax.set_ylim(0, line * 1.45)  # the legend goes in the room above the line rate, not over the data
    ax.set_ylabel("received (Gb/s)")
    ax.set_title(title)
    ax.legend(fontsize=6, ncol=len(series), loc="upper right", title="each sender's share (stacked)",
              title_fontsize=6, columnspacing=0.8, handlelength=1.2)
    ax.tick_params(labelbottom=False)
    qs = result["queue_series"]
    if not qs:
        below.text(0.5, 0.5, "the queue was not sampled (BMv2's queues are simple_switch's own)",
                   transform=below.transAxes, ha="center", fontsize=8)
    below.plot([t for t, _ in qs], [q / 1024 for _, q in qs], color="tab:red", linewidth=1,
               label=f"queue at {result['hot_port']}")
    held = result["held_series"]
    top = max((q / 1024 for _, q in qs), default=1.0) or 1.0
    for (t0, _), (t1, share) in zip(held, held[1:], strict=False):
        if share > 0:
            below.axvspan(t0, t1, ymin=0, ymax=1, color="tab:blue", alpha=0.08 + 0.3 * share, linewidth=0)
    below.plot([], [], color="tab:blue", alpha=0.3, linewidth=6, label="PFC holding senders (darker: more of them)")
    if result.get("xoff_queue_bytes"):
        xoff = result["xoff_queue_bytes"] / 1024
        top = max(top, xoff)
        below.axhline(xoff, color="black", linestyle="--", linewidth=1,
                      label=f"XOFF: {result['xoff_ingress_ports']} ingress ports at the buffer's dynamic threshold")
    below.set_ylim(0, top * 1.3)
    below.set_ylabel("queue (KiB)")
    below.set_xlabel("fabric time since the first byte arrived (us)")
    below.legend(fontsize=6, loc="upper right")
