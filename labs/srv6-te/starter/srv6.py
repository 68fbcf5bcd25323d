"""Lab srv6-te: fill in each function (see README.md), then run `sudo .venv/bin/emu lab check srv6-te`."""

from __future__ import annotations

from emu import FabricStats

BACKBONE = ("r0", "r1", "r2", "r3", "r4")


def end_sid(k: int) -> str:
    """Step 1: the End SID of router k."""
    raise NotImplementedError("step 1: fc00:K::e with K in hex")


def dt6_sid(k: int) -> str:
    """Step 1: the End.DT6 SID of (edge) router k."""
    raise NotImplementedError("step 1: fc00:K::d6 with K in hex")


def long_way() -> list[str]:
    """Step 2: segments that take campus 0's traffic to campus 1 by r4 and r3, delivered at pe1."""
    raise NotImplementedError("step 2: an End SID per router to visit, then pe1's End.DT6")


def routers_crossed(before: FabricStats, after: FabricStats, packets: int) -> list[str]:
    """Step 3: the backbone routers that forwarded at least `packets` packets between the snapshots."""
    raise NotImplementedError("step 3: sum tx_packets over each router's ports, after minus before")
