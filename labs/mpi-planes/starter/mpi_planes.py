"""Lab mpi-planes: your work. Each function is one step of README.md; replace each TODO."""

from __future__ import annotations


def ring_peer(env: dict[str, str]) -> str:
    """Step 1: the address of the next rank in a ring (rank RANK + 1, rank 0 after the last), from the
    environment `emu run` gives a rank (RANK, WORLD_SIZE, EMU_HOSTS)."""
    raise NotImplementedError("read RANK, WORLD_SIZE and EMU_HOSTS")


def seconds_per_allreduce(stdout: str) -> float:
    """Step 2: the seconds one allreduce took, from what rank 0 of allreduce.c printed."""
    raise NotImplementedError("find the line 'allreduce bytes ... seconds S ok 1' and return S")


def busbw_gbps(nbytes: int, ranks: int, seconds: float) -> float:
    """Step 3: nccl-tests' bus bandwidth of one allreduce of `nbytes` over `ranks` ranks, in Gb/s."""
    raise NotImplementedError("algbw = bytes / seconds; busbw = algbw x 2 (n - 1) / n; in Gb/s")


def ideal_seconds(nbytes: int, ranks: int, planes: int, rate_bps: float) -> float:
    """Step 4: a ring allreduce's time if every rank's planes carried TCP's goodput all along:
    2 (n - 1) / n x nbytes, at planes x rate x the payload share of a TCP frame."""
    raise NotImplementedError("TCP carries 1448 B of payload in 1538 B on the wire")
