"""Lab mpi-planes: a solution."""

from __future__ import annotations

import re

TCP_SHARE = 1448 / 1538  # payload in a full TCP frame (MSS 1448 with timestamps) / its bytes on the wire


def ring_peer(env: dict[str, str]) -> str:
    """Step 1: the address of the next rank in a ring."""
    hosts = env["EMU_HOSTS"].split(",")
    return hosts[(int(env["RANK"]) + 1) % int(env["WORLD_SIZE"])]


def seconds_per_allreduce(stdout: str) -> float:
    """Step 2: the seconds one allreduce took, as the program printed them."""
    m = re.search(r"allreduce bytes \d+ ranks \d+ iterations \d+ seconds ([\d.]+) ok 1", stdout)
    if m is None:
        raise ValueError(f"no result line in {stdout!r}")
    return float(m.group(1))


def busbw_gbps(nbytes: int, ranks: int, seconds: float) -> float:
    """Step 3: nccl-tests' bus bandwidth, Gb/s."""
    return nbytes * 8 / seconds * 2 * (ranks - 1) / ranks / 1e9


def ideal_seconds(nbytes: int, ranks: int, planes: int, rate_bps: float) -> float:
    """Step 4: the ring's bandwidth term at TCP's goodput on every plane."""
    return 2 * (ranks - 1) / ranks * nbytes * 8 / (planes * rate_bps * TCP_SHARE)
