"""Lab collectives: fill in each function (see README.md), then run `sudo .venv/bin/emu lab check collectives`."""

from __future__ import annotations


def steps(algo: str, n: int) -> int:
    """Step 1: how many steps of an allreduce over n ranks run one after the other: "ring" (a
    reduce-scatter then an allgather around the ring) or "tree" (up and down a binary tree)."""
    raise NotImplementedError("step 1: the ring's 2 x (n - 1); the tree's 2 x its depth, ceil(log2 n)")


def predict_us(algo: str, n: int, size: int, step_us: float, gbps: float) -> float:
    """Step 2: microseconds an allreduce of `size` bytes a rank takes, by the alpha-beta model: each step
    costs `step_us`, plus the bytes a rank sends in it at `gbps` (Gb/s)."""
    raise NotImplementedError("step 2: steps x step_us + bytes out of a rank / rate")


def long_haul_bytes(algo: str, n: int, size: int) -> float:
    """Step 3: payload bytes an allreduce of `size` bytes a rank puts on the long links between two
    regions of n / 2 ranks each: "ring" (ranks in region order, so the ring crosses twice) or "hier"
    (reduce-scatter inside each region, allreduce of each shard across, allgather inside)."""
    raise NotImplementedError("step 3: count what crosses, both ways")
