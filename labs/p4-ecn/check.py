"""Checker of lab p4-ecn: the student's EcnDecide compiled into fabric.p4, run on BMv2 under congestion."""

from __future__ import annotations

import atexit
import shutil
import subprocess
from pathlib import Path

from emu import FabricNet, FPFTopo
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

    def fraction(lo: int, hi: int) -> tuple[float, int]:
        seen = sum(curve[d][0] for d in range(lo, hi + 1))
        return sum(curve[d][1] for d in range(lo, hi + 1)) / max(1, seen), seen

    if not any(marked for _, marked in curve):
        raise StepFailed("nothing was marked at any depth: write TODO 1 and TODO 2")
    below, n_below = fraction(0, 20)
    low, n_low = fraction(24, 38)
    high, n_high = fraction(42, 62)
    if below > 0:
        raise StepFailed(f"{below:.1%} of the packets that found 20 or fewer queued were marked: never below kmin")
    hint = (f"marked {low:.2f} of the packets at 24-38 and {high:.2f} at 42-62; RED gives about 0.18 "
            "and 0.53: mark when random(0..65535) < (depth - kmin) x step (TODO 2)")
    # Decisively wrong needs few packets: a step at kmin marks all 48 of 48 (a congestion that backs off
    # hard leaves the queue little time in the bands). Wrong by less must be shown with enough of them.
    if _clearly_outside(low, n_low, 0.05, 0.35) or _clearly_outside(high, n_high, 0.35, 0.8):
        raise StepFailed(hint)
    if n_low < 50 or n_high < 20:
        raise RuntimeError(f"too few packets found the queue in the bands ({n_low}, {n_high}) to tell")
    if not 0.05 < low < 0.35 < high < 0.8:
        raise StepFailed(hint)
    return f"marked {below:.2f} below Kmin, {low:.2f} at 24-38 packets, {high:.2f} at 42-62"


def _clearly_outside(fraction: float, n: int, lo: float, hi: float) -> bool:
    """`fraction` of `n` packets lies outside [lo, hi] by more than three standard deviations of a
    fraction at the nearer bound: wrong whatever more packets would add."""
    if n < 10 or lo <= fraction <= hi:
        return False
    bound = lo if fraction < lo else hi
    return abs(fraction - bound) > 3 * (bound * (1 - bound) / n) ** 0.5


STEPS = [step_compiles, step_marks, step_curve]
