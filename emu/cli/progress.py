"""Progress on long work, for a person at a terminal: how far a fabric-clock job has got, and how fast.

Shown on stderr, only when both stdout and stderr are terminals and the output is not --json (a pipe, a
file, a CI log or a JSON reader sees nothing of it), and only for a job that has run a second of wall
time (short ones would flicker). It reads what the engine's wait already polls (emu.dataplane.engine's
JOB_WATCHERS): the job's fabric time, so it says fabric time done and fabric time per wall second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from emu.units import format_time

SHOW_AFTER_S = 1.0  # wall seconds a job runs before its progress is drawn


def wanted(as_json: bool) -> bool:
    return not as_json and sys.stdout.isatty() and sys.stderr.isatty()


@contextmanager
def job_progress(as_json: bool) -> Iterator[None]:
    """While the command runs, draw each fabric-clock job's progress (see the module's docstring)."""
    if not wanted(as_json):
        yield
        return
    # Only here: a command that draws nothing loads no engine.
    from emu.dataplane.engine import JOB_WATCHERS

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    tasks: dict[int, tuple[int, float, float]] = {}  # job -> (task, its first fabric time, wall then)

    def watch(job: int, fabric_s: float | None) -> None:
        now = time.monotonic()
        if fabric_s is None:  # done
            if job in tasks:
                progress.remove_task(tasks.pop(job)[0])
            return
        if job not in tasks:
            tasks[job] = (-1, fabric_s, now)
        task, f0, w0 = tasks[job]
        if now - w0 < SHOW_AFTER_S:
            return
        if task < 0:
            task = progress.add_task("", total=None)
            tasks[job] = (task, f0, w0)
        done = fabric_s - f0
        rate = done / (now - w0)
        progress.update(task, description=f"job {job}: {format_time(done)} of fabric time, "
                                          f"{format_time(rate)} a wall second")

    JOB_WATCHERS.append(watch)
    try:
        with progress:
            yield
    finally:
        JOB_WATCHERS.remove(watch)
