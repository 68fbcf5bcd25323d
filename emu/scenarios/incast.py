"""Incast: N GPUs send to one GPU at once in the lossless class.

The receiver's leaf port is N times oversubscribed. With PFC the fabric
pauses upstream, hop by hop back to the senders' NICs, and loses nothing;
without it the same traffic overflows the buffer. The result counts bytes
offered and delivered, lossless drops, PFC frames and ECN marks, read from
the engine's counters, and plots what the receiver got from each sender.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from emu.net.fabric import FabricNet
from emu.net.fidelity import fidelity_warnings
from emu.net.switch import RunSettings
from emu.topo.common import TopologyError
from emu.topo.fpf import FPFTopo
from emu.units import UnitError, parse_rate, parse_size

DEFAULT_DILATION = 10000.0  # keeps 7 line-rate senders within one Python worker's budget
PORT = 9000
DSCP_LOSSLESS = 26
ECT0 = 0b10


@dataclass(frozen=True)
class IncastParams:
    senders: int = 7
    bytes_per_sender: int = 1 << 20
    size: int = 1400
    rate: float = 100e9
    leaves: int = 2
    spines: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.senders <= 63:
            raise TopologyError(f"incast: senders must be in 1..63, got {self.senders}")
        if not 64 <= self.size <= 1458:
            raise TopologyError(f"incast: datagram size must be in 64..1458 bytes, got {self.size}")
        if self.bytes_per_sender < self.size:
            raise TopologyError("incast: bytes per sender must be at least one datagram")

    @classmethod
    def parse(cls, params: dict[str, str]) -> IncastParams:
        known = {"senders", "bytes", "size", "rate", "leaves", "spines"}
        unknown = set(params) - known
        if unknown:
            raise TopologyError(f"incast: unknown parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        try:
            return cls(
                senders=int(params.get("senders", 7)),
                bytes_per_sender=parse_size(params.get("bytes", "1MiB")),
                size=int(params.get("size", 1400)),
                rate=parse_rate(params.get("rate", "100G")),
                leaves=int(params.get("leaves", 2)),
                spines=int(params.get("spines", 2)),
            )
        except (ValueError, UnitError) as exc:
            raise TopologyError(f"incast: {exc}") from None


def _child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def run(params: dict[str, str], settings: RunSettings, out_dir: str) -> dict[str, Any]:
    p = IncastParams.parse(params)
    gpus = p.senders + 1
    topo = FPFTopo(gpus=gpus, planes=1, leaves=min(p.leaves, gpus), spines=p.spines, rate=f"{p.rate:g}")
    net = FabricNet(topo, settings=settings)
    wall_rate = p.rate / settings.dilation
    try:
        net.start()
        receiver = net.get("gpu0")
        dst = receiver.IP()
        total = p.senders * -(-p.bytes_per_sender // p.size) * p.size  # whole datagrams, as sent
        py = [sys.executable, "-m", "emu.traffic.udp"]
        rx = receiver.popen(py + ["recv", str(PORT), "--expect", str(total), "--idle", "3", "--bin",
                                  str(max(0.005, 10e-6 * settings.dilation))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env(), text=True)
        if "ready" not in (rx.stdout.readline() if rx.stdout else ""):
            raise RuntimeError(f"incast receiver on gpu0 did not start: {rx.stderr.read() if rx.stderr else ''}")
        txs = []
        for i in range(1, gpus):
            cmd = py + ["send", dst, str(PORT), "--bytes", str(p.bytes_per_sender), "--size", str(p.size),
                        "--rate", str(wall_rate), "--tos", str(DSCP_LOSSLESS << 2 | ECT0)]
            txs.append(net.get(f"gpu{i}").popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                env=_child_env(), text=True))
        sent = [json.loads(t.communicate(timeout=300)[0]) for t in txs]
        got = json.loads(rx.communicate(timeout=300)[0])
        stats = net.engine.stats()
    finally:
        net.stop()
    return summarise(p, settings, sent, got, stats, out_dir)


def summarise(p: IncastParams, settings: RunSettings, sent: list[dict], got: dict, stats: dict, out_dir: str) -> dict:
    lossless = (3,)
    drops_lossless = pfc = ecn = nic_overflow = socket_drops = 0
    paused = 0.0
    hwm = 0
    drops_by_reason: dict[str, int] = {}
    for sw in stats["switches"].values():
        for port in sw["ports"].values():
            for reason, n in port["drops"].items():
                drops_by_reason[reason] = drops_by_reason.get(reason, 0) + n
            drops_lossless += sum(port["drops_tc"][tc] for tc in lossless)
            nic_overflow += port["drops"].get("host_nic_overflow", 0)
            socket_drops += port["drops"].get("rx_socket_overflow", 0)
            pfc += port["pfc_tx"]
            ecn += port["ecn_marked"]
            paused += sum(port["paused_s"]) + sum(port.get("host_nic", {}).get("paused_s", [0.0]))
            hwm = max(hwm, max(port["queue_hwm"]))
    offered = sum(s["sent_bytes"] for s in sent)
    delivered = got["received_bytes"]
    result = {
        "scenario": "incast",
        "dilation": settings.dilation,
        "pfc": settings.pfc,
        "senders": p.senders,
        "link_rate_bps": p.rate,
        "offered_bytes": offered,
        "delivered_bytes": delivered,
        "lost_bytes": offered - delivered,
        "drops_lossless": drops_lossless,
        "drops_host_nic": nic_overflow,
        "drops_socket": socket_drops,
        "drops_by_reason": drops_by_reason,
        "pfc_frames": pfc,
        "ecn_marked": ecn,
        "paused_fabric_s": paused,
        "queue_hwm_bytes": hwm,
        "receive_fabric_s": got["wall_s"] / settings.dilation,
        "goodput_fabric_bps": (delivered * 8 / got["wall_s"] * settings.dilation) if got["wall_s"] else 0.0,
        "fidelity_warnings": fidelity_warnings(stats),
    }
    if settings.pfc:
        result["passed"] = drops_lossless == 0 and pfc > 0 and delivered == offered
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"incast-{'pfc' if settings.pfc else 'nopfc'}")
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    result["plot"] = plot(got, settings, base + ".png", title=f"Incast {p.senders}:1, PFC {'on' if settings.pfc else 'off'}")
    return result


def plot(got: dict, settings: RunSettings, path: str, *, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    bin_s = got["bin_s"]
    for src, bins in sorted(got["bins"].items()):
        ks = sorted(int(k) for k in bins)
        xs = [k * bin_s / settings.dilation * 1e6 for k in ks]
        ys = [bins[str(k)] * 8 / bin_s * settings.dilation / 1e9 for k in ks]
        ax.plot(xs, ys, label=src, linewidth=1)
    ax.set_xlabel("fabric time (us)")
    ax.set_ylabel("received from sender (Gb/s, fabric)")
    ax.set_title(f"{title} (D={settings.dilation:g})")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
