"""Checker of lab mpi-planes: an MPI program of the lab's own (allreduce.c, compiled with mpicc) run with
`emu run`'s machinery across four FPF hosts, on one plane and on both; its own MPI_Wtime figures are
fabric time (libfaketime), read as printed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from emu import FabricNet, FPFTopo
from emu.labs import StepFailed

MODULE = "mpi_planes.py"
CLOCKS = ("wall",)
CLOCK_NOTE = "the job is the hosts' own processes over their kernels' TCP: fabric time = wall time / D"
D = 2000
GPUS, PLANES, RATE = 4, 2, 100e9
FLOATS, ITERATIONS = 1 << 19, 3  # 2 MiB a rank, three times
_runs: dict[str, Any] = {}  # what the jobs printed, shared by the steps (run once)


@contextmanager
def fabric(clock: str) -> Iterator[FabricNet]:
    if shutil.which("mpicc") is None:
        raise RuntimeError("mpicc not found: apt-get install openmpi-bin libopenmpi-dev (make setup installs them)")
    with tempfile.TemporaryDirectory(prefix="lab-mpi-planes-") as d:
        program = os.path.join(d, "allreduce")
        subprocess.run(["mpicc", "-O2", "-o", program, str(Path(__file__).parent / "allreduce.c")], check=True,
                       capture_output=True, timeout=120)
        _runs.clear()
        _runs["program"] = program
        with FabricNet(FPFTopo(gpus=GPUS, planes=PLANES, leaves=1), clock=clock, dilation=D) as net:
            yield net


def _job(net: FabricNet, planes: list[int]) -> str:
    key = ",".join(map(str, planes))
    if key not in _runs:
        rs = net.run([_runs["program"], str(FLOATS), str(ITERATIONS)], mpi=True, planes=planes, timeout=300)
        _runs[key] = rs[0].stdout
    return _runs[key]


def _seconds(stdout: str) -> float:
    m = re.search(r"seconds ([\d.]+) ok 1", stdout)
    if m is None:
        raise RuntimeError(f"the program printed no result: {stdout!r} (the fabric, not your code)")
    return float(m.group(1))


def step_ring(work, net: FabricNet) -> str:
    """Step 1: each rank's ring peer"""
    rs = net.run(["env"])
    hosts = [net.get(f"gpu{g}").IP() for g in range(GPUS)]
    for r in rs:
        env = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        truth = hosts[(r.rank + 1) % GPUS]
        said = work.ring_peer(env)
        if said != truth:
            raise StepFailed(f"rank {r.rank} (EMU_HOSTS={env['EMU_HOSTS']}) sends to {truth}; ring_peer said {said!r}")
    return f"{GPUS} ranks, each its next one's address"


SAMPLE = "allreduce bytes 2097152 ranks 4 iterations 3 seconds 0.000530123 ok 1\n"


def step_time(work, net: FabricNet) -> str:
    """Step 2: the program's own figure"""
    said = work.seconds_per_allreduce(SAMPLE)  # a known line first (a TODO stops here, before any job runs)
    if said != 0.000530123:
        raise StepFailed(f"from {SAMPLE.strip()!r}, seconds_per_allreduce said {said!r}, not 0.000530123")
    out = []
    for planes in ([0], list(range(PLANES))):
        stdout = _job(net, planes)
        said, truth = work.seconds_per_allreduce(stdout), _seconds(stdout)
        if not isinstance(said, float) or abs(said - truth) > 1e-12:
            raise StepFailed(f"rank 0 printed {stdout.strip()!r}: one allreduce took {truth} s; "
                             f"seconds_per_allreduce said {said!r}")
        out.append(f"{truth * 1e6:.0f} us on {len(planes)} plane(s)")
    return "; ".join(out) + " (fabric time, the program's own MPI_Wtime)"


def step_busbw(work, net: FabricNet) -> str:
    """Step 3: bus bandwidth"""
    out = []
    nbytes = FLOATS * 4
    work.busbw_gbps(nbytes, GPUS, 1e-3)  # a TODO stops here, before any job runs
    for planes in ([0], list(range(PLANES))):
        s = _seconds(_job(net, planes))
        truth = nbytes * 8 / s * 2 * (GPUS - 1) / GPUS / 1e9
        said = work.busbw_gbps(nbytes, GPUS, s)
        if abs(said - truth) > 1e-6 * truth:
            raise StepFailed(f"{nbytes} B over {GPUS} ranks in {s} s is a bus bandwidth of {truth:.3f} Gb/s; "
                             f"busbw_gbps said {said!r}: algbw = bytes / s, busbw = algbw x 2 (n - 1) / n")
        out.append(f"{truth:.1f} Gb/s on {len(planes)} plane(s)")
    return "busbw " + ", ".join(out)


def step_ideal(work, net: FabricNet) -> str:
    """Step 4: measured against the ideal"""
    nbytes = FLOATS * 4
    out = []
    for planes in ([0], list(range(PLANES))):
        truth = 2 * (GPUS - 1) / GPUS * nbytes * 8 / (len(planes) * RATE * 1448 / 1538)
        said = work.ideal_seconds(nbytes, GPUS, len(planes), RATE)
        if abs(said - truth) > 1e-9 * truth:
            raise StepFailed(f"on {len(planes)} plane(s) of {RATE / 1e9:g} Gb/s the ring's bandwidth term is "
                             f"{truth * 1e6:.2f} us; ideal_seconds said {said!r}")
        out.append(f"{len(planes)} plane(s): measured {_seconds(_job(net, planes)) / truth:.2f} x ideal")
    return "; ".join(out)


STEPS = [step_ring, step_time, step_busbw, step_ideal]
