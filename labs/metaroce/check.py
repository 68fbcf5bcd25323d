"""Checker of lab metaroce: one real 16 MiB write with a plane failing under it, read by the student."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from emu import FabricNet, FPFTopo
from emu.labs import StepFailed

MODULE = "metaroce.py"
CLOCKS = ("fabric", "wall")  # the write is the project's own: exact on the fabric clock; D for the wall's
D = 10_000
FAILED = 2
_run: dict[str, Any] = {}  # the one transfer every step reads


@contextmanager
def fabric(clock: str) -> Iterator[FabricNet]:
    with FabricNet(FPFTopo(gpus=2, planes=4, leaves=1), clock=clock, dilation=D) as net:
        yield net


def _transfer(net: FabricNet) -> tuple[dict[str, Any], dict[str, Any]]:
    if not _run:
        # Under way: plane 2 fails once it has carried 1 MiB, and is restored after.
        w = net.roce.write("gpu0", "gpu1", nbytes=16 << 20, fail_plane=(FAILED, 0.25))  # at 1 MiB of its 4 MiB
        _run["client"], _run["server"] = w.client, w.server
    return _run["client"], _run["server"]


def _last_growth(client: dict[str, Any], plane: int) -> float:
    trace = client["plane_trace"]
    growing = [t for (t, now), (_, before) in zip(trace[1:], trace, strict=False) if now[plane] > before[plane]]
    return growing[-1] if growing else trace[0][0]


def step_ok(work, net: FabricNet) -> str:
    """Step 1: every byte arrived"""
    client, server = _transfer(net)
    if not work.transfer_ok(client, server):
        raise StepFailed(f"{client['completions_ok']}/{client['completions']} writes completed and data_ok is "
                         f"{server['data_ok']}: transfer_ok said False")
    if not work.transfer_ok(client, {**server, "data_ok": False}):
        return f"{client['completions']} writes, data intact, {client['retransmits']} packets resent"
    raise StepFailed("transfer_ok said True for a transfer whose data check failed")


def step_failed(work, net: FabricNet) -> str:
    """Step 2: where the lost packets went"""
    client, _ = _transfer(net)
    truth = [i for i, p in enumerate(client["planes"]) if p["downs"] > 0]
    if FAILED not in truth or _last_growth(client, FAILED) >= client["plane_trace"][-1][0]:
        raise RuntimeError(f"plane {FAILED} never went down under the transfer (planes marked down: {truth}): "
                           "the checker's failure, not your code")
    said = sorted(work.failed_planes(client))
    if said != truth:
        raise StepFailed(f"planes taken out of the spray: {truth}; failed_planes said {said}")
    p = client["planes"][FAILED]
    return f"plane {FAILED}: {p['retransmits']} packets resent elsewhere, {p['probes']} probes"


def step_when(work, net: FabricNet) -> str:
    """Step 3: when it failed"""
    client, _ = _transfer(net)
    truth, said = _last_growth(client, FAILED), work.failure_time(client, FAILED)
    start = client["plane_trace"][0][0]
    if abs(said - truth) > 1e-9:
        raise StepFailed(f"plane {FAILED} last grew {(truth - start) * 1e6:.2f} us of fabric time into the "
                         f"transfer; failure_time said {(said - start) * 1e6:.2f} us")
    return f"plane {FAILED} stopped {(truth - start) * 1e6:.2f} us of fabric time into the transfer"


def step_after(work, net: FabricNet) -> str:
    """Step 4: who took over"""
    client, _ = _transfer(net)
    t = _last_growth(client, FAILED)
    trace = client["plane_trace"]
    at = next(sent for ts, sent in trace if ts >= t)
    moved = [end - start for start, end in zip(at, trace[-1][1], strict=True)]
    truth = [m / sum(moved) for m in moved]
    said = work.share_after(client, t)
    if len(said) != len(truth) or any(abs(a - b) > 0.01 for a, b in zip(said, truth, strict=True)):
        raise StepFailed(f"after {t * 1e6:.2f} us the planes sent {[round(x, 3) for x in truth]}; share_after said "
                         f"{said}")
    return "after the failure: " + ", ".join(f"{x:.3f}" for x in truth)


STEPS = [step_ok, step_failed, step_when, step_after]
