"""Progress on long work, for a person at a terminal: how far a fabric's bring-up and a fabric-clock job
have got, and how fast.

Shown on stderr, only when both stdout and stderr are terminals and the output is not --json (a pipe, a
file, a CI log or a JSON reader sees nothing of it), and only for work that has taken a second of wall
time (short work would flicker). A bring-up is a bar: hosts made of the topology's, links made of its,
then the engine's start (its switches, tables and routes), with the time left at the rate so far
(emu.net.fabric's BRINGUP_WATCHERS). A job reads what the engine's wait already polls
(emu.dataplane.engine's JOB_WATCHERS): the job's fabric time, so it says fabric time done and fabric time
per wall second.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from emu.units import format_time

# Wall seconds work runs before its progress is drawn (EMU_PROGRESS_AFTER_S: 0 draws all of it).
SHOW_AFTER_S = float(os.environ.get("EMU_PROGRESS_AFTER_S") or 1.0)


def wanted(as_json: bool) -> bool:
    return not as_json and sys.stdout.isatty() and sys.stderr.isatty()


STAGES = {"hosts": "bring-up: hosts", "links": "bring-up: links", "engine": "bring-up: the engine's switches and routes"}


@contextmanager
def work_progress(as_json: bool) -> Iterator[None]:
    """While the command runs, draw its bring-ups' and fabric-clock jobs' progress (see the module's
    docstring)."""
    if not wanted(as_json):
        yield
        return
    # Only here: a command that draws nothing loads no engine.
    from emu.dataplane.engine import JOB_WATCHERS
    from emu.net.fabric import BRINGUP_WATCHERS

    # One live display (rich draws one at a time): a job's line has no bar (its end is not known).
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[counts]}"),
                        TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    began: list[float] = []  # wall time of the bring-up's first step
    stages: dict[str, int] = {}  # stage -> its bar

    def bringup(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not stage:  # the fabric is up
            for task in stages.values():
                progress.remove_task(task)
            stages.clear()
            began.clear()
            return
        if not began:
            began.append(now)
        if now - began[0] < SHOW_AFTER_S and stage not in stages:
            return
        if stage not in stages:
            stages[stage] = progress.add_task(STAGES.get(stage, stage), total=total, counts="")
        progress.update(stages[stage], completed=done, total=total, counts=f"{done}/{total}")

    tasks: dict[int, tuple[int, float, float]] = {}  # job -> (task, its first fabric time, wall then)

    def watch(job: int, fabric_s: float | None) -> None:
        now = time.monotonic()
        if fabric_s is None:  # done
            task = tasks.pop(job, (-1, 0.0, 0.0))[0]
            if task >= 0:  # it was drawn (a job done within SHOW_AFTER_S never was)
                progress.remove_task(task)
            return
        if job not in tasks:
            tasks[job] = (-1, fabric_s, now)
        task, f0, w0 = tasks[job]
        if now - w0 < SHOW_AFTER_S:
            return
        if task < 0:
            task = progress.add_task("", total=None, counts="")
            tasks[job] = (task, f0, w0)
        done = fabric_s - f0
        rate = done / (now - w0) if now > w0 else 0.0
        progress.update(task, description=f"job {job}: {format_time(done)} of fabric time, "
                                          f"{format_time(rate)} a wall second")

    JOB_WATCHERS.append(watch)
    BRINGUP_WATCHERS.append(bringup)
    try:
        with progress:
            yield
    finally:
        JOB_WATCHERS.remove(watch)
        BRINGUP_WATCHERS.remove(bringup)
