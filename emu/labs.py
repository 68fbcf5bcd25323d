"""Teaching labs: list them, copy a starter to work on, and check the work on a real fabric.

A lab is a folder of labs/ (the p4lang tutorials' shape): README.md (goal,
background, numbered steps, questions), starter/ (the student's copy, with
TODOs), solution/, and check.py. check.py defines `MODULE` (the file the
student edits, e.g. "planes.py"), `STEPS`, a list of functions
`step(work, net) -> str`, each returning what it measured on success and
raising `StepFailed(hint)` on failure, and optionally `fabric(clock)`, a
context manager giving the `net` every step shares (a FabricNet on that
clock, torn down at the end whatever happened), with `CLOCKS`, the clocks it
can run on, its default first (the fabric clock wherever the lab's measured
traffic is the project's own: exact, and as fast as the CPU allows), and
`CLOCK_NOTE`, why it has only those. `work` is the student's module, imported from their
folder (or whatever the checker's `load(path)` makes of the file, for work
that is not Python). A step whose code is still a TODO (NotImplementedError) fails with
the hint to do it; a step that fails does not stop the next.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from emu.clock import ClockKind, check_clock

LABS_DIR = Path(os.environ.get("EMU_LABS", Path(__file__).resolve().parent.parent / "labs"))


class LabError(ValueError):
    """A lab that does not exist, a folder that is not a lab's, a working copy in the way."""


class StepFailed(AssertionError):
    """A step's check did not hold; the message is the hint the student sees."""


@dataclass(frozen=True)
class StepResult:
    step: str
    passed: bool
    detail: str  # what was measured, or the hint
    seconds: float


def lab_names() -> list[str]:
    if not LABS_DIR.is_dir():
        return []
    return sorted(p.name for p in LABS_DIR.iterdir() if (p / "check.py").is_file())


def lab_dir(name: str) -> Path:
    if name not in lab_names():
        raise LabError(f"no lab {name!r}; labs: {', '.join(lab_names()) or 'none found in ' + str(LABS_DIR)}")
    return LABS_DIR / name


def title(name: str) -> str:
    """The README's first heading."""
    for line in (lab_dir(name) / "README.md").read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return name


def first_step(name: str) -> str:
    """The README's first numbered step, as the student reads it after `emu lab start`."""
    text = (lab_dir(name) / "README.md").read_text()
    m = re.search(r"^## Step 1\b.*?(?=^## |\Z)", text, re.M | re.S)
    return m.group(0).strip() if m else text.strip()


def start(name: str, dest: str | None = None) -> Path:
    """Copy the starter to `dest` (default ./lab-NAME); never over an existing folder."""
    src = lab_dir(name) / "starter"
    target = Path(dest or f"lab-{name}")
    if target.exists():
        raise LabError(f"{target} already exists: work there, or give another folder")
    shutil.copytree(src, target)
    shutil.copy(lab_dir(name) / "README.md", target / "README.md")
    return target


def _load(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LabError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def clocks(name: str) -> tuple[ClockKind, ...]:
    """The clocks lab `name`'s checker can run its fabric on, its default first (check.py's `CLOCKS`, names)."""
    return _clocks_of(_checker(name))


def _clocks_of(checker: ModuleType) -> tuple[ClockKind, ...]:
    return tuple(check_clock(c) for c in getattr(checker, "CLOCKS", (ClockKind.WALL,)))


def steps(name: str) -> list[str]:
    """Lab `name`'s steps in order, labelled as a check reports them ("Step 1: the formula"): what a test
    of every step counts."""
    return [_label(step) for step in _checker(name).STEPS]


def _label(step: Callable[..., str]) -> str:
    return (step.__doc__ or step.__name__).strip().splitlines()[0]


def _checker(name: str) -> ModuleType:
    return _load(lab_dir(name) / "check.py", f"emu_lab_check_{name.replace('-', '_')}")


def check(name: str, *, solution: bool = False, work_dir: str | None = None, clock: str | ClockKind | None = None,
          seed: int | None = None, progress: Callable[[StepResult], None] | None = None) -> dict[str, Any]:
    """Run every step of lab `name` on the student's work (their folder, default ./lab-NAME) or on the
    lab's solution, on `clock` (default: the lab's first; see clocks()); {"lab", "clock", "seed",
    "passed", "steps": [{"step", "passed", "detail", "seconds"}]}. What a checker draws at random (which
    plane fails) comes from `seed`, a fresh one if None, said in the result: a check that failed can be
    run again the same way."""
    seed = random.SystemRandom().randrange(1 << 31) if seed is None else seed
    random.seed(seed)
    folder = lab_dir(name)
    checker = _checker(name)
    can = _clocks_of(checker)
    clock = check_clock(clock) if clock else can[0]
    if clock not in can:
        raise LabError(f"lab {name} runs on the {' or '.join(can)} clock, not {clock}"
                       + (f": {checker.CLOCK_NOTE}" if hasattr(checker, "CLOCK_NOTE") else ""))
    where = folder / "solution" if solution else Path(work_dir or f"lab-{name}")
    path = where / checker.MODULE
    if not path.is_file():
        raise LabError(f"no {checker.MODULE} in {where}: start the lab with `emu lab start {name}` first")
    results: list[StepResult] = []
    try:
        # A checker whose work is not Python (a P4 lab) says how to take it: `load(path)`.
        work = checker.load(path) if hasattr(checker, "load") else _load(path, f"emu_lab_work_{name.replace('-', '_')}")
    except Exception as exc:  # the student's file does not even import: say where
        results.append(StepResult("import", False, f"{path} does not import: {exc!r}", 0.0))
        work = None
    if work is not None:
        with (checker.fabric(clock) if hasattr(checker, "fabric") else nullcontext()) as net:
            for step in checker.STEPS:
                results.append(_run_step(step, work, net))
                if progress:
                    progress(results[-1])
    return {"lab": name, "clock": clock, "seed": seed, "passed": bool(results) and all(r.passed for r in results),
            "steps": [asdict(r) for r in results]}


def _run_step(step: Callable[[ModuleType, Any], str], work: ModuleType, net: Any) -> StepResult:
    label = _label(step)
    t0 = time.monotonic()
    try:
        detail, passed = step(work, net), True
    except StepFailed as exc:
        detail, passed = str(exc), False
    except NotImplementedError as exc:
        detail, passed = f"still a TODO: {exc}" if str(exc) else "still a TODO", False
    except Exception:
        detail, passed = "the step raised:\n" + traceback.format_exc(limit=-3), False
    return StepResult(label, passed, str(detail), round(time.monotonic() - t0, 2))
