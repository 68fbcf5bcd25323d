"""Checker of lab p4-ecn: the student's EcnDecide compiled into fabric.p4, run on BMv2 under congestion."""

from __future__ import annotations

import atexit
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from emu import FabricNet, FPFTopo
from emu.backends.bmv2.cli import red_params
from emu.labs import LABS_DIR, StepFailed
from emu.launch import scratch_dir
from emu.roce.run import PerfRun, mininet_popen

MODULE = "ecn_decide.p4"
CLOCKS = ("wall",)
CLOCK_NOTE = "BMv2's simple_switch keeps wall time"
D = 5000
P4 = LABS_DIR.parent / "p4"
_run: dict = {}


def load(path: Path) -> Path:
    """The student's work is P4, not Python: the runner gets its path."""
    return path


def _compile(work: Path) -> str:
    if shutil.which("p4c-bm2-ss") is None or shutil.which("simple_switch") is None:
        raise StepFailed("BMv2 (simple_switch) or p4c (p4c-bm2-ss) is not installed here: this lab needs both "
                         "(p4lang's packages or a source build; `emu doctor` says what is missing)")
    scratch = scratch_dir("lab-p4")  # root only; `emu clean` removes it if this checker is killed
    atexit.register(shutil.rmtree, scratch, True)
    out = Path(scratch) / "fabric.json"
    r = subprocess.run(["p4c-bm2-ss", "--std", "p4-16", "-I", str(work.parent), "-I", str(P4), "-o", str(out),
                        str(P4 / "fabric.p4")], capture_output=True, text=True)
    if r.returncode != 0:
        errors = [line for line in r.stderr.splitlines() if "error" in line.lower()] or r.stderr.splitlines()
        raise StepFailed("p4c-bm2-ss refused it:\n" + "\n".join(errors[:8]))
    return str(out)


def _congest(json_path: str) -> dict:
    if "server" not in _run:
        net = FabricNet(FPFTopo(gpus=3, planes=1, leaves=1), dilation=D, backend="bmv2", links="engine",
                        ecn=(30_000, 120_000, 1.0), p4_json=json_path)
        with net:
            clients, server = PerfRun([mininet_popen(net.get("gpu0")), mininet_popen(net.get("gpu1"))],
                                      mininet_popen(net.get("gpu2")), nbytes=4 << 20, dilation=D, cc="dcqcn",
                                      lat_iters=0).wait()
            _run.update(port=net.stats().port("p0l0", "p0l0-eth3"), curve=net.engine.ecn_by_depth("p0l0"),
                        server=server)
    return _run


def step_compiles(work: Path, net: None) -> str:
    """Step 1: it compiles"""
    _run["json"] = _compile(work)
    return "p4c-bm2-ss compiled fabric.p4 with your EcnDecide"


def step_marks(work: Path, net: None) -> str:
    """Step 2: marks under congestion"""
    if "json" not in _run:
        raise StepFailed("it did not compile (step 1)")
    r = _congest(_run["json"])
    if not r["server"]["data_ok"]:
        raise RuntimeError("the writes did not arrive intact: the fabric, not your marking")
    if r["port"].ecn_marked == 0:
        raise StepFailed("the congested port marked nothing: set mark = 1 at kmax or more (TODO 1)")
    return f"{r['port'].ecn_marked} packets marked, {r['server']['cnps_sent']} CNPs sent by the receiver"


def step_curve(work: Path, net: None) -> str:
    """Step 3: the RED curve"""
    if "curve" not in _run:
        raise StepFailed("no congestion run to read (step 2)")
    curve = _run["curve"]
    if not any(marked for _, marked in curve):
        raise StepFailed("nothing was marked at any depth: write TODO 1 and TODO 2")
    seen_below = sum(curve[d][0] for d in range(KMIN + 1))
    marked_below = sum(curve[d][1] for d in range(KMIN + 1))
    if marked_below:
        raise StepFailed(f"{marked_below} of the {seen_below} packets that found {KMIN} or fewer queued were "
                         "marked: never at kmin or below")
    bands = [_band(curve, lo, hi) for lo, hi in BANDS]
    told = ", ".join(f"{b.fraction:.2f} at {lo}-{hi} (RED: {b.expected:.2f})" for b, (lo, hi) in zip(bands, BANDS, strict=True))
    hint = f"marked {told}: mark when random(0..65535) < (depth - kmin) x step (TODO 2)"
    # The depths the queue visited are the fabric's, not the student's: RED's prediction is computed for
    # exactly those, so a queue that sat low in a band does not read as a wrong slope. Every depth
    # between kmin and the counters' last (63: or more) is tested as one sum too: the queue crosses the
    # upper band quickly, and only the whole range holds enough packets to see a slope off by half.
    whole = _band(curve, KMIN + 1, 62)
    if any(abs(b.z) > Z_WRONG for b in (*bands, whole)):
        raise StepFailed(hint)
    if whole.seen < MIN_SEEN:
        raise RuntimeError(f"too few packets found the queue between {KMIN + 1} and 62 ({whole.seen}; {MIN_SEEN} "
                           "are needed) to tell")
    return f"marked none at {KMIN} packets or fewer, " + told


KMIN, KMAX, STEP = red_params(30_000, 120_000, 1.0)  # what _congest's ecn=(bytes, bytes, Pmax) sets
BANDS = ((KMIN + 4, KMIN + 18), (KMIN + 22, KMIN + 42))  # packets; two bands inside (kmin, kmax), told
Z_WRONG = 4.5  # standard deviations: a right answer falls outside once in about 150 000 tests
MIN_SEEN = 300  # packets between kmin and 62: fewer, and a slope off by half could pass unseen


class _Band(NamedTuple):
    seen: int
    fraction: float  # marked / seen
    expected: float  # RED's fraction for the same depths
    z: float  # (marked - expected marks) in standard deviations of a binomial sum


def _band(curve: list[tuple[int, int]], lo: int, hi: int) -> _Band:
    """The marks in depths lo..hi against RED's probability at each depth, weighted by the packets
    that found each one (a sum of binomials: its mean and variance)."""
    seen = marked = 0
    mean = var = 0.0
    for d in range(lo, hi + 1):
        n, m = curve[d]
        p = min(1.0, max(0.0, (d - KMIN) * STEP / 65536))
        seen, marked, mean, var = seen + n, marked + m, mean + n * p, var + n * p * (1 - p)
    z = (marked - mean) / var ** 0.5 if var > 0 else (0.0 if marked == mean else float("inf"))
    return _Band(seen, marked / max(1, seen), mean / max(1, seen), z)


STEPS = [step_compiles, step_marks, step_curve]
