"""Checker of lab planes: each step runs the student's function on a real FPF fabric."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import contextmanager

from emu import FabricNet, FPFTopo
from emu.labs import StepFailed

MODULE = "planes.py"
CLOCKS = ("fabric", "wall")  # its writes are the project's own: exact on the fabric clock; D for the wall's
D = 10_000
PLANES = 4


@contextmanager
def fabric(clock: str) -> Iterator[FabricNet]:
    with FabricNet(FPFTopo(gpus=4, planes=PLANES, leaves=1), clock=clock, dilation=D) as net:
        yield net


def _write(net: FabricNet, nbytes: int) -> None:
    if not net.roce.write("gpu0", "gpu1", nbytes=nbytes).data_ok:
        raise RuntimeError("the MetaRoCE write did not arrive intact: the fabric, not your code")


def _shares(before, after) -> list[float]:
    sent = [after.switch(f"p{p}l0").tx_bytes - before.switch(f"p{p}l0").tx_bytes for p in range(PLANES)]
    return [s / sum(sent) for s in sent]


def step_addressing(work, net: FabricNet) -> str:
    """Step 1: addressing"""
    for g in range(4):
        for p in range(PLANES):
            text = net.get(f"gpu{g}").cmd(f"ip -4 -o addr show dev gpu{g}-eth{p}")
            real = re.search(r"inet (\S+)/", text).group(1)
            said = work.plane_address(g, p)
            if said != real:
                raise StepFailed(f"gpu{g} on plane {p} is {real}, plane_address said {said!r}: "
                                 "plane p, leaf l, slot s is 10.p.l.(s+2)")
    return "16 of 16 addresses right"


def step_reachable(work, net: FabricNet) -> str:
    """Step 2: ping every plane"""
    got = sorted(work.reachable_planes(net, "gpu0", "gpu3"))
    if got != list(range(PLANES)):
        raise StepFailed(f"every plane is up, reachable_planes said {got}")
    net.fail(plane=2)
    try:
        got = sorted(work.reachable_planes(net, "gpu0", "gpu3"))
    finally:
        net.restore(plane=2)
    if got != [0, 1, 3]:
        raise StepFailed(f"with plane 2 failed, planes 0, 1 and 3 answer; reachable_planes said {got}")
    return "4 planes, then 3 with plane 2 failed"


def step_shares(work, net: FabricNet) -> str:
    """Step 3: spraying, seen in the counters"""
    def judge(before, after, case: str) -> list[float]:
        truth, said = _shares(before, after), work.plane_shares(before, after)
        if len(said) != PLANES or any(abs(a - b) > 0.01 for a, b in zip(said, truth, strict=True)):
            raise StepFailed(f"{case}, the leaves' counters give {[round(x, 3) for x in truth]}, plane_shares said "
                             f"{said}: subtract before from after for each p{{P}}l0, then divide by the total")
        return truth

    before = net.stats()
    _write(net, 4 << 20)
    even = judge(before, net.stats(), "with every plane up")
    if max(even) - min(even) > 0.05:
        raise RuntimeError(f"the fabric sprayed unevenly ({even}): not your code")
    # Spraying is even, so a constant answer cannot be told from a computed one there: judge a write
    # with a plane down too, where the right shares are not all alike.
    net.fail(plane=1)
    try:
        before = net.stats()
        _write(net, 2 << 20)
        after = net.stats()
    finally:
        net.restore(plane=1)
    judge(before, after, "with plane 1 down")
    return "shares " + ", ".join(f"{x:.3f}" for x in even) + ", and with plane 1 down"


def step_dead_plane(work, net: FabricNet) -> str:
    """Step 4: a plane fails"""
    before = net.stats()
    _write(net, 1 << 20)
    even = _shares(before, net.stats())
    if work.dead_plane(even) is not None:
        raise StepFailed(f"every plane carried its part ({[round(x, 3) for x in even]}); dead_plane should say None")
    dead = random.randrange(PLANES)
    net.fail(plane=dead)
    try:
        before = net.stats()
        _write(net, 2 << 20)
        shares = _shares(before, net.stats())
    finally:
        net.restore(plane=dead)
    said = work.dead_plane(shares)
    if said != dead:
        raise StepFailed(f"plane {dead} failed (shares {[round(x, 3) for x in shares]}); dead_plane said {said}")
    return f"plane {dead} failed: shares " + ", ".join(f"{x:.3f}" for x in shares)


STEPS = [step_addressing, step_reachable, step_shares, step_dead_plane]
