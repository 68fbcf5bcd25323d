"""Lab collectives: a solution."""

from __future__ import annotations

import math


def steps(algo: str, n: int) -> int:
    """Step 1: the ring's reduce-scatter and allgather are n - 1 steps each; the tree's sums go up its
    depth and the result comes down it."""
    if algo == "ring":
        return 2 * (n - 1)
    return 2 * math.ceil(math.log2(n))


def predict_us(algo: str, n: int, size: int, step_us: float, gbps: float) -> float:
    """Step 2: the ring sends a chunk (size / n) a step; a tree's inner rank sends its half of the data
    to each of two children, the whole size out of it, pipelined under the steps."""
    bytes_per_us = gbps * 1e3 / 8
    if algo == "ring":
        return steps("ring", n) * (step_us + size / n / bytes_per_us)
    return steps("tree", n) * step_us + 2 * size / bytes_per_us


def long_haul_bytes(algo: str, n: int, size: int) -> float:
    """Step 3: the ring crosses at two of its n hops, each carrying a chunk at each of its 2(n - 1) steps;
    hier sends half of each rank's chunk (size / (n / 2)) across and gets the reduced half back."""
    if algo == "ring":
        return 2 * 2 * (n - 1) * size / n
    g = n // 2
    return n * 2 * (size / g) / 2
