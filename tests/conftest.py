"""Markers that skip with a reason, and a fixture that proves root tests leave nothing behind."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import time

import pytest

from emu.net.cleanup import clean


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
