"""Markers that skip with a reason, and a fixture that proves root tests leave nothing behind."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace

import pytest

from emu.net.cleanup import clean
from tests.helpers import on_time

# The machine's learnt state (what --dilation auto learnt) and its kept logs are the user's: the suite
# and every process it starts use folders of their own (EMU_CACHE_DIR and EMU_LOG_DIR are inherited),
# and the session fails if the machine's own folders changed while it ran.
MACHINE_STATE = ("/var/cache/emu", "/var/log/emu")
_SCRATCH = tempfile.mkdtemp(prefix="suite-state-")
os.environ["EMU_CACHE_DIR"] = os.path.join(_SCRATCH, "cache")
os.environ["EMU_LOG_DIR"] = os.path.join(_SCRATCH, "log")
# Where the labs are is the checkout's, not the shell's: a user's EMU_LABS (their own labs folder) would
# make the lab tests check that folder instead (issue 51, item 12).
os.environ.pop("EMU_LABS", None)
# The core every process of the suite runs on is named, not left to the shell: EMU_CORE=python is how a
# machine without a compiler tests the Python core alone, and anything else means the compiled core (which
# pytest_configure then requires), so a shell's stray EMU_CORE=native (or a typo) tests what a default run
# does rather than failing deep inside one test (issue 51, item 12).
os.environ["EMU_CORE"] = "python" if os.environ.get("EMU_CORE") == "python" else "native"
# EMU_RECORD_FIGURES=1 makes test_cores write the figures it would compare with (then skip): meant for
# `EMU_RECORD_FIGURES=1 pytest tests/test_cores.py`, never for a check, so `make test` and `make
# check-long` unset it; a run with it set says so in its header and in each skip.
RECORDING = bool(os.environ.get("EMU_RECORD_FIGURES"))


def pytest_report_header(config):
    lines = [f"EMU_CORE={os.environ['EMU_CORE']} for every process of the suite"]
    if RECORDING:
        lines.append("EMU_RECORD_FIGURES is set: test_cores records its figures rather than comparing them")
    return lines


def _tree(paths: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for dirpath, _, files in (w for p in paths for w in os.walk(p)):
        for name in files:
            full = os.path.join(dirpath, name)
            try:
                with open(full, "rb") as f:
                    out[full] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                out[full] = "unreadable"
    return out


def pytest_configure(config):
    config._emu_machine_state = _tree(MACHINE_STATE)
    _require_compiled_core()


def _require_compiled_core() -> None:
    """The suite tests both cores: without the compiled one it stops, saying why, unless the user asked for
    the Python core alone (EMU_CORE=python). Otherwise the tests comparing the two would skip or drop their
    compiled case, and a green suite would have left the compiled core untested."""
    from emu.dataplane.core import native, why_not

    if os.environ.get("EMU_CORE") != "python" and native() is None:
        pytest.exit(f"{why_not()}. The suite tests the compiled core: build it (`make setup`), or set "
                    "EMU_CORE=python to test the Python core alone", returncode=3)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    before = getattr(session.config, "_emu_machine_state", None)
    if before is None:
        return
    after = _tree(MACHINE_STATE)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        session.config.get_terminal_writer().line(
            f"FAILED: the suite changed the machine's own state: {', '.join(changed)}", red=True)
        session.exitstatus = 1


def _has_mininet() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mnexec") is not None


def pytest_collection_modifyitems(config, items):
    root = os.geteuid() == 0
    mininet = _has_mininet()
    for item in items:
        if "root" in item.keywords and not root:
            item.add_marker(pytest.mark.skip(reason="needs root for namespaces and veth (run as root, as CI does)"))
        if "mininet" in item.keywords and not mininet:
            item.add_marker(pytest.mark.skip(reason="needs Mininet and mnexec (apt-get install mininet)"))


# Processes a run of ours may start: what must not outlive a test.
_OURS = re.compile(r"emu|mininet:|simple_switch|mnexec|iperf3|tcpdump|tshark|\bping\b")


def _snapshot() -> tuple[set[str], set[str], set[tuple[int, str]], set[str]]:
    """Interfaces of the root namespace, named namespaces, our kind of processes (pid, command line),
    and files of ours (run and scratch folders under /run/emu, anything called /tmp/emu*): taken
    independently of emu.net.cleanup, so the fixture does not judge clean() by itself."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    links = {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2}
    try:
        namespaces = set(os.listdir("/run/netns"))
    except OSError:
        namespaces = set()
    procs = set()
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if int(pid) != me and state != "Z" and cmd and _OURS.search(cmd) and "pytest" not in cmd:
            procs.add((int(pid), cmd))
    files = set(glob.glob("/run/emu/run-*")) | set(glob.glob("/run/emu/scratch/*")) | set(glob.glob("/tmp/emu*"))
    return links, namespaces, procs, files


@pytest.fixture
def no_leftovers():
    """Clean before; after the test, compare what exists with what existed before it (interfaces,
    namespaces, processes, each listed on its own) and fail on anything new; then clean up anyway."""
    clean()
    before = _snapshot()
    yield
    deadline = time.monotonic() + 3.0  # a process killed at the end may take a moment to go
    while True:
        after = _snapshot()
        new = [sorted(a - b) for a, b in zip(after, before, strict=True)]
        if not any(new) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    report = clean()
    assert not any(new), (f"the test left things behind: interfaces {new[0]}, namespaces {new[1]}, "
                          f"processes {new[2]}, files {new[3]} (emu clean found: {report})")


@pytest.fixture(scope="session")
def wcmp_native(tmp_path_factory):
    """The wcmp scenario on the native engine and the fabric clock (1024 flows, 2 MiB), run once for the
    suite: test_scenarios judges it in detail and test_bmv2 compares BMv2's verdict with it (seconds)."""
    from emu.net.switch import RunSettings
    from emu.scenarios import run_scenario

    return run_scenario("wcmp", {"flows": "1024", "bytes": "2MiB"}, RunSettings(clock="fabric"),
                        out_dir=str(tmp_path_factory.mktemp("wcmp")))


@pytest.fixture(scope="session")
def lab_solution():
    """`lab_solution(name)`: `emu lab check NAME --solution --json` as a student runs it (the lab's own
    clock, the default core), with one random seed for the session, run once a lab for the suite:
    (the completed process, its wall seconds). test_labs judges it; test_cores compares the Python
    core's run of the same seed with it."""
    import random
    import sys

    seed = random.randrange(1 << 31)
    done: dict[str, tuple[subprocess.CompletedProcess, float]] = {}

    def run(name: str) -> tuple[subprocess.CompletedProcess, float]:
        if name not in done:
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "emu.cli.main", "lab", "check", name, "--solution", "--json",
                                "--seed", str(seed)], capture_output=True, text=True, timeout=600)
            done[name] = (r, time.monotonic() - t0)
        return done[name]

    run.seed = seed  # type: ignore[attr-defined]
    return run


@pytest.fixture(scope="session")
def incast_native(tmp_path_factory):
    """The 5:1 incast with PFC and without, on the native engine and the wall clock at D = 20 000 (256 KiB
    buffers), run once for the suite: test_scenarios judges it, test_bmv2 compares BMv2's with it."""
    from emu.net.switch import RunSettings
    from emu.scenarios import run_scenario

    out = tmp_path_factory.mktemp("incast")
    base = RunSettings(backend="native", links="auto", buffer_per_port=256 << 10)
    params = {"senders": "5", "bytes": "512KiB"}
    return {pfc: on_time(lambda d, pfc=pfc: run_scenario("incast", params, replace(base, pfc=pfc), dilation=d,
                                                         out_dir=str(out)), 20000)
            for pfc in (True, False)}, out


def _cores() -> list[str]:
    from emu.dataplane.core import native

    return ["python", "native"] if native() is not None else ["python"]


@pytest.fixture(params=_cores())
def both_cores(request, monkeypatch):
    """The test runs on each core (the Python reference, and the compiled one where it was built): what it
    asserts of the reference must hold of its twin."""
    from emu.dataplane.wiring import VirtualFabric

    monkeypatch.setattr(VirtualFabric, "CORE", request.param)
    return request.param
