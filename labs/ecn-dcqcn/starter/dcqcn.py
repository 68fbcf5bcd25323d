"""Lab ecn-dcqcn: fill in each function (see README.md), then `sudo .venv/bin/emu lab check ecn-dcqcn`."""

from __future__ import annotations


def mark_probability(q: float, kmin: float, kmax: float, pmax: float) -> float:
    """Step 1: the chance a packet finding q bytes queued is marked (RED)."""
    raise NotImplementedError("step 1: 0 below kmin, 1 at kmax or more, a line up to pmax between")


def ecn_parameters() -> tuple[int, int, float]:
    """Step 2: (Kmin bytes, Kmax bytes, Pmax) for the congested 100G port."""
    raise NotImplementedError("step 2: choose thresholds; try a few and compare")
