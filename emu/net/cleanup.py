"""Remove whatever a crashed run left: worker processes, node shells, interfaces, namespaces.

A running fabric records what it made in its run directory (/run/emu/run-*):
root-side interface names and the pids of Mininet's node shells. A clean
stop deletes the directory; after a crash `emu clean` reads it back. On top
of the records it sweeps by name: processes running the engine worker
module or a simple_switch that logs under BMV2_LOG_DIR, namespaces called
emu-*, and root interfaces called emu*. Running
it twice is harmless.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field

from emu.dataplane.engine import RUN_ROOT, WORKER_MODULE
from emu.net.netns import PREFIX, ip_batch, list_project_namespaces, run

RECORD = "created.json"
BMV2_LOG_DIR = "/tmp/emu-bmv2"  # every simple_switch the BMv2 backend starts logs here


def netns_id(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def record(run_dir: str, *, interfaces: list[str], pids: list[int], hosts: dict[str, int] | None = None) -> None:
    """What a run made: its root-side interfaces, its node shells, and their network namespaces
    (a process started in a host outlives its shell, and keeps the namespace and its veths alive)."""
    mine = netns_id(os.getpid())
    namespaces = sorted({n for n in (netns_id(p) for p in pids) if n and n != mine})
    with open(os.path.join(run_dir, RECORD), "w") as f:
        json.dump({"interfaces": interfaces, "pids": pids, "netns": namespaces, "hosts": hosts or {}}, f)


@dataclass
class CleanReport:
    processes: list[int] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.processes or self.interfaces or self.namespaces or self.run_dirs)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _worker_pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) != me and _ours(_cmdline(int(p)))]


def _ours(cmdline: str) -> bool:
    return f"-m {WORKER_MODULE}" in cmdline or (cmdline.startswith("simple_switch ") and BMV2_LOG_DIR in cmdline)


def _kill(pids: list[int]) -> list[int]:
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    if killed:
        time.sleep(0.1)
    return killed


def _root_interfaces() -> list[str]:
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(": ")
        if len(parts) > 1:
            names.append(parts[1].split("@")[0])
    return names


def clean() -> CleanReport:
    report = CleanReport()
    recorded_ifs: set[str] = set()
    recorded_pids: list[int] = []
    recorded_netns: set[str] = set()
    if os.path.isdir(RUN_ROOT):
        for d in sorted(os.listdir(RUN_ROOT)):
            path = os.path.join(RUN_ROOT, d)
            try:
                with open(os.path.join(path, RECORD)) as f:
                    rec = json.load(f)
                recorded_ifs.update(rec.get("interfaces", []))
                recorded_pids += [p for p in rec.get("pids", []) if "mininet:" in _cmdline(p)]
                recorded_netns.update(rec.get("netns", []))
            except (OSError, ValueError):
                pass
            report.run_dirs.append(path)
    report.processes += _kill(_worker_pids())
    report.processes += _kill(recorded_pids)
    if recorded_netns:
        me = os.getpid()
        report.processes += _kill([int(p) for p in os.listdir("/proc")
                                   if p.isdigit() and int(p) != me and netns_id(int(p)) in recorded_netns])
    namespaces = list_project_namespaces()
    for ns in namespaces:
        pids = run(["ip", "netns", "pids", ns], check=False).stdout.split()
        report.processes += _kill([int(p) for p in pids])
    present = set(_root_interfaces())
    doomed = sorted((recorded_ifs & present) | {n for n in present if n.startswith("emu")})
    ip_batch([f"link del {n}" for n in doomed] + [f"netns del {ns}" for ns in namespaces], check=False)
    report.interfaces = doomed
    report.namespaces = namespaces
    for path in report.run_dirs:
        shutil.rmtree(path, ignore_errors=True)
    return report


__all__ = ["clean", "record", "CleanReport", "PREFIX"]
