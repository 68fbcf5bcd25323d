"""Incast: N GPUs send to one GPU at once in the lossless class.

The receiver's leaf port is N times oversubscribed. With PFC the fabric
pauses upstream, hop by hop back to the senders' NICs, and loses nothing;
without it the same traffic overflows the buffer. The result counts bytes
offered and delivered, lossless drops, PFC frames and ECN marks, read from
the engine's counters, and plots what the receiver got from each sender.
"""

from __future__ import annotations

from typing import Any

from emu.net.fidelity import fabric_fidelity
from emu.net.switch import RunSettings
from emu.scenarios.common import (
    DSCP_LOSSLESS,
    ECT0,
    Flow,
    ScenarioError,
    Traffic,
    fabric,
    int_param,
    only,
    rate_param,
    rate_series,
    save,
    size_param,
    totals,
)
from emu.topo.fpf import FPFTopo

DEFAULT_DILATION = 10000.0  # keeps 7 line-rate senders within one Python worker's budget
PORT = 9000


def load_pps(params: dict[str, str]) -> float:
    """Packets per fabric second the senders offer together (for --dilation auto)."""
    frame = int_param(params, "size", 1400, "incast") + 42
    return int_param(params, "senders", 7, "incast") * rate_param(params, "rate", "100G", "incast") / (frame * 8)


def run(params: dict[str, str], settings: RunSettings, out_dir: str) -> dict[str, Any]:
    only(params, {"senders", "bytes", "size", "rate", "leaves", "spines"}, "incast")
    senders = int_param(params, "senders", 7, "incast")
    nbytes = size_param(params, "bytes", "1MiB", "incast")
    size = int_param(params, "size", 1400, "incast")
    rate = rate_param(params, "rate", "100G", "incast")
    if not 1 <= senders <= 63:
        raise ScenarioError(f"incast: senders must be in 1..63, got {senders}")
    if not 64 <= size <= 1458 or nbytes < size:
        raise ScenarioError("incast: datagram size must be in 64..1458 and bytes at least one datagram")
    if settings.backend == "bmv2" and settings.pfc and settings.links == "netem":
        raise ScenarioError("incast on BMv2 with PFC needs --links engine (or auto): netem honours no pause frame, "
                            "the engine is each BMv2 port's MAC")
    gpus = senders + 1
    topo = FPFTopo(gpus=gpus, planes=1, leaves=min(int_param(params, "leaves", 2, "incast"), gpus),
                   spines=int_param(params, "spines", 2, "incast"), rate=f"{rate:g}")
    with fabric(topo, settings) as net:
        dst = net.get("gpu0").IP()
        flows = [Flow(f"gpu{i}", "gpu0", dst, PORT, nbytes, rate, size=size, tos=DSCP_LOSSLESS << 2 | ECT0)
                 for i in range(1, gpus)]
        sent, got = Traffic(net, flows, dilation=settings.dilation).wait()
        stats = net.engine.stats()
    rx = got[("gpu0", PORT, False)]
    offered = sum(s["sent_bytes"] for s in sent)
    planned = sum(f.wire_bytes for f in flows)  # from the parameters: a send that failed still counts
    delivered = rx["received_bytes"]
    t = totals(stats)
    result = {
        "scenario": "incast",
        "dilation": settings.dilation,
        "pfc": settings.pfc,
        "senders": senders,
        "link_rate_bps": rate,
        "planned_bytes": planned,
        "offered_bytes": offered,
        "send_errors": sum(s["errors"] for s in sent),
        "delivered_bytes": delivered,
        "lost_bytes": planned - delivered,
        **t,
        "drops_host_nic": t["drops_by_reason"].get("host_nic_overflow", 0),
        "drops_socket": t["drops_by_reason"].get("rx_socket_overflow", 0),
        "receive_fabric_s": rx["wall_s"] / settings.dilation,
        "goodput_fabric_bps": delivered * 8 / rx["wall_s"] * settings.dilation if rx["wall_s"] else 0.0,
        "fidelity": fabric_fidelity(stats, rate_bps=rate, frame_bytes=size + 42, senders=sent),
    }
    if settings.pfc:
        result["passed"] = t["drops_lossless"] == 0 and t["pfc_frames"] > 0 and delivered == planned

    def draw(ax: Any) -> None:
        for src, (xs, ys) in sorted(rate_series(rx, settings.dilation).items()):
            ax.plot(xs, ys, label=src, linewidth=1)
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("received from sender (Gb/s)")
        ax.set_title(f"Incast {senders}:1, PFC {'on' if settings.pfc else 'off'} (D={settings.dilation:g})")
        ax.legend(fontsize=7, ncol=2)

    return save(out_dir, f"incast-{'pfc' if settings.pfc else 'nopfc'}", result, draw)
