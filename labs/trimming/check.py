"""Checker of lab trimming: a real 4:1 MetaRoCE incast on a trimming fabric, cut at the student's size."""

from __future__ import annotations

import atexit
import shutil
from typing import Any

from emu import FabricNet, FPFTopo
from emu.dataplane.pcap import read_frames
from emu.labs import StepFailed
from emu.launch import scratch_dir
from emu.roce.run import EnginePerf

MODULE = "trimming.py"
CLOCKS = ("fabric",)
CLOCK_NOTE = "its incasts run inside the engine, so the same size cuts the same packets every run"
SENDERS = 4
NBYTES = 256 << 10
DSCP = 11
_runs: dict[int, dict[str, Any]] = {}  # by trim size: each incast once


def _incast(size: int) -> dict[str, Any]:
    """The incast on a trimming fabric that keeps `size` bytes: the senders' and receiver's results, the
    switch's cuts, and every frame that crossed the receiver's port."""
    if size not in _runs:
        pcap = scratch_dir("lab-trim")  # root only; `emu clean` removes it if this checker is killed
        atexit.register(shutil.rmtree, pcap, True)
        try:
            net = FabricNet(FPFTopo(gpus=SENDERS + 1, planes=1, leaves=1), clock="fabric", pfc=False,
                            trim=(size, DSCP), buffer_per_port=64 << 10, pcap_dir=pcap)
        except ValueError as exc:
            raise StepFailed(f"a switch cannot keep {size} bytes: {exc}") from None
        with net:
            clients, server = EnginePerf(net.engine, [net.host_planes(f"gpu{i}") for i in range(1, SENDERS + 1)],
                                         net.host_planes("gpu0"), nbytes=NBYTES, cc="dcqcn", lat_iters=0,
                                         trim_dscp=DSCP).wait()
            cuts = sum(net.stats().port("p0l0", "p0l0-eth1").trimmed)
        frames = [f for _, f in read_frames(f"{pcap}/p0l0-p0l0-eth1.pcap")]
        _runs[size] = {"clients": clients, "server": server, "cuts": cuts, "frames": frames}
    return _runs[size]


def step_cut(work, net: None) -> str:
    """Step 1: the cut"""
    for size in (48, 64, 128, 1000):
        said = tuple(work.trimmed_lengths(size))
        if said != (size - 40, size - 40):
            raise StepFailed(f"cut to {size} bytes after Ethernet: IPv6 payload and UDP length {size - 40}, "
                             f"trimmed_lengths said {said}: the IPv6 header is 40 bytes, the UDP length counts its "
                             "own 8")
    return "lengths right at 48, 64, 128 and 1000 bytes"


def step_size(work, net: None) -> str:
    """Step 2: how much to keep"""
    size = int(work.trim_size())
    run = _incast(size)
    clients, server = run["clients"], run["server"]
    nacks = sum(c["trim_nacks"] for c in clients)
    timeouts = sum(c["timeouts"] for c in clients)
    if not server["data_ok"]:
        raise StepFailed(f"with {size} bytes kept, not every byte arrived intact")
    if run["cuts"] == 0:
        raise StepFailed(f"with {size} bytes kept nothing was cut (a data packet is 1104 bytes after Ethernet): "
                         "the full queue dropped instead, and the senders waited for timers")
    if timeouts or nacks < run["cuts"]:
        raise StepFailed(f"{run['cuts']} packets cut, {nacks} NACKed, {timeouts} resent by the timer: with {size} "
                         "bytes the receiver cannot read whose packet it was (its QP and PSN are in the BTH, "
                         "12 bytes after IPv6 and UDP)")
    return f"{size} bytes kept: {run['cuts']} packets cut, all NACKed and resent at once, no timer"


def step_nack(work, net: None) -> str:
    """Step 3: the NACK path"""
    run = _incast(64)
    truth = []
    for f in run["frames"]:  # Ethernet 14, IPv6 40, UDP 8: the BTH at 62, its AETH at 74
        if len(f) >= 78 and f[12:14] == b"\x86\xdd" and f[20] == 17 and f[56:58] == b"\x12\xb7" \
                and f[62] == 0x11 and f[74] == 0x60:
            truth.append(int.from_bytes(f[75:78], "big"))
    if not truth:
        raise RuntimeError("the incast cut nothing: the checker's fabric, not your code")
    said = list(work.nacked_psns(run["frames"]))
    if said != truth:
        raise StepFailed(f"the receiver NACKed {len(truth)} PSNs (first {truth[:5]}); nacked_psns said "
                         f"{len(said)} (first {said[:5]}): a NACK is an ACK packet whose AETH syndrome is 0x60, "
                         "the PSN in the AETH's last three bytes (the BTH's PSN is the cumulative one)")
    return f"{len(truth)} NACKs read, the first for PSNs {', '.join(map(str, truth[:4]))}"


STEPS = [step_cut, step_size, step_nack]
