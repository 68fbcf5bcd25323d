"""Progress on long work (issue 40, item 3): on a terminal, on stderr; never with --json, never into a
pipe, a file or a CI log."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

import pytest

from tests.helpers import EMU

# A fabric-clock collective on the reference core, long enough (seconds) to be shown.
LONG = ["bench", "collective", "allreduce", "--topo", "fpf", "--gpus", "8", "--planes", "8", "--sizes", "4MiB",
        "--core", "python"]
SHORT = ["bench", "collective", "allreduce", "--topo", "fpf", "--gpus", "8", "--planes", "8", "--sizes", "64KiB"]


def _run(args: list[str], *, stdout_tty: bool, env: dict[str, str] | None = None) -> str:
    """Run emu with stderr (and stdout, if asked) on a pseudo-terminal of 120 x 40: what the terminal got."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", **(env or {})}
    p = subprocess.Popen([*EMU, *args], stdin=slave, stdout=slave if stdout_tty else subprocess.DEVNULL,
                         stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every end of the terminal is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=600) == 0, out.decode(errors="replace")[-2000:]
    return out.decode(errors="replace")


@pytest.mark.root
@pytest.mark.mininet
def test_progress_is_drawn_on_a_terminal_and_nowhere_else(no_leftovers):
    shown = _run(LONG, stdout_tty=True)
    assert "job 1:" in shown and "of fabric time" in shown and "a wall second" in shown, shown[-2000:]
    assert "# Avg bus bandwidth" in shown  # the result itself, as without progress
    # The bring-up's bars (hosts, links, the engine) and the job's line, drawn from the start here
    # (EMU_PROGRESS_AFTER_S=0; by default after a second, which this small fabric does not take) ...
    now = {"EMU_PROGRESS_AFTER_S": "0"}
    bars = _run(SHORT, stdout_tty=True, env=now)
    assert "bring-up: links" in bars and "bring-up: the engine's switches and routes" in bars, bars[-3000:]
    assert re.search(r"bring-up: links\S*\s.*\b(\d+)/\1\b", bars), bars[-3000:]  # all of them, n of n
    # ... and none of it with --json, or with stdout to a file or a pipe, though it would be drawn at once.
    for args, tty in (([*SHORT, "--json"], True), (SHORT, False)):
        quiet = _run(args, stdout_tty=tty, env=now)
        assert "bring-up" not in quiet and "of fabric time" not in quiet, quiet[-2000:]
    # A job done before its progress was due to be drawn ends quietly (it once raised KeyError here).
    assert "# Avg bus bandwidth" in _run(SHORT, stdout_tty=True, env={"EMU_PROGRESS_AFTER_S": "30"})
