"""Remove whatever a crashed run left: worker processes, node shells, interfaces, namespaces.

A fabric records what it will make in its run directory (/run/emu/run-*)
before making it: the interface names its links will have, then, once built,
the pids of Mininet's node shells and their namespaces. Each record names its
owner (pid and process start time, since pids are reused), so `emu clean`
tells a live run from a dead one: it removes what dead runs made, and
nothing a live run holds (its interfaces, workers, switches, shells). On top
of the records it sweeps what can only be ours: engine workers and BMv2
switches of no live run (a worker started over ssh, whose run directory is
its machine's own, judged by the record it wrote there: its session),
Mininet node shells orphaned to init, namespaces called emu-*, and root
interfaces called emu* that no record names and whose device group's owner
(its pid, netlink.new_group) is gone. A clean stop deletes its run
directory; running `emu clean` twice is harmless.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from emu.dataplane.engine import RUN_ROOT, WORKER_MODULE
from emu.launch import SCRATCH, owner, proc_stat, process_start, scratch_owner_alive
from emu.net.netlink import Netlink, NetlinkError, group_pid, namespace_pids, remove_namespace
from emu.net.netns import PREFIX, list_project_namespaces

RECORD = "created.json"
BMV2_LOG_DIR = os.path.join(RUN_ROOT, "bmv2")  # logs of simple_switch started outside a run (checks)


SWITCH_NS_PREFIX = "emu-p4-"  # a P4 switch's own namespace: emu-p4-RUN-SWITCH or emu-p4-pidPID-SWITCH


def switch_namespace(switch: str, log_dir: str) -> str:
    """The namespace a P4 switch runs in, named after its run (the run folder it logs in) so that
    `emu clean` leaves a live run's alone; a switch outside any run is named after its owner's pid."""
    path = log_dir.rstrip("/")
    base = os.path.basename(path)
    in_run = base.startswith("run-") and os.path.dirname(path) == RUN_ROOT
    return f"{SWITCH_NS_PREFIX}{base[len('run-'):] if in_run else f'pid{os.getpid()}'}-{switch}"


def _held(namespace: str, live_runs: set[str]) -> bool:
    """A switch namespace whose run is live, or whose owner (a switch outside any run) still is."""
    if not namespace.startswith(SWITCH_NS_PREFIX):
        return False
    tag = namespace[len(SWITCH_NS_PREFIX):]
    if tag.startswith("pid"):
        pid = tag[3:].split("-", 1)[0]
        return pid.isdigit() and os.path.exists(f"/proc/{pid}")
    return any(os.path.basename(r).startswith("run-") and tag.startswith(os.path.basename(r)[4:] + "-")
               for r in live_runs)


def netns_id(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


SCRATCH_NETNS = "netns.json"  # in a scratch folder: network namespaces whose processes die with its owner
SCRATCH_IFS = "interfaces.json"  # and interfaces here its owner holds while it lives (a namespace cluster's LAN)
# and namespaces whose processes are no host's while its owner lives: a namespace cluster's machines and the
# controller's own, which a machine of it sees too (it shares this machine's processes)
SCRATCH_SPARE = "spare.json"


def named_netns_id(name: str) -> str:
    """A named namespace's id, as /proc/PID/ns/net reads for a process in it ("" if it is gone)."""
    try:
        return f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
    except OSError:
        return ""


def _scratch_netns(*, alive: bool, what: str = SCRATCH_NETNS) -> set[str]:
    """What scratch folders list (namespaces, SCRATCH_NETNS; or interfaces, SCRATCH_IFS), of owners alive
    or of owners gone."""
    out: set[str] = set()
    if os.path.isdir(SCRATCH):
        for name in os.listdir(SCRATCH):
            try:
                if scratch_owner_alive(name) == alive:
                    with open(os.path.join(SCRATCH, name, what)) as f:
                        out.update(json.load(f))
            except (OSError, ValueError):
                pass
    return out


def netns_trees(spaces: set[str]) -> list[int]:
    """Every process in one of the network namespaces `spaces` (ids as netns_id gives them), and every
    descendant of one: a session in a namespace machine, and the namespaced shells it started."""
    me = os.getpid()
    parent: dict[int, int] = {}
    inside = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != me:
            parent[int(p)] = proc_stat(int(p), 1)
            if netns_id(int(p)) in spaces:
                inside.append(int(p))
    doomed = set(inside)
    grew = True
    while grew:
        new = {p for p, pp in parent.items() if pp in doomed and p not in doomed and p != me}
        doomed |= new
        grew = bool(new)
    return sorted(doomed)


def record(run_dir: str, *, interfaces: list[str], pids: list[int] | None = None,
           hosts: dict[str, int] | None = None, groups: list[int] | None = None) -> None:
    """What this run made or is about to make: interfaces and the device groups of its links' root
    ends (both kept from earlier records too), its node shells and their network namespaces (a process
    started in a host outlives its shell, and keeps the namespace and its veths alive), and who owns
    the run. Shells and hosts not given (None) are the earlier record's: a part of the run that makes
    interfaces of its own (a BMv2 fabric's engine links) records them without knowing the shells."""
    path = os.path.join(run_dir, RECORD)
    old: dict[str, Any] = {}
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        pass
    earlier, earlier_groups = old.get("interfaces", []), old.get("groups", [])
    if pids is None:
        pids, namespaces = old.get("pids", []), old.get("netns", [])
    else:
        mine = netns_id(os.getpid())
        namespaces = sorted({n for n in (netns_id(p) for p in pids) if n and n != mine})
    if hosts is None:
        hosts = old.get("hosts", {})
    rec = {"owner": owner(),
           "interfaces": sorted(set(earlier) | set(interfaces)), "pids": pids, "netns": namespaces,
           "groups": sorted(set(earlier_groups) | set(groups or [])),
           "hosts": hosts or {},
           # Which interface each name is now (names are reused): a clean deletes it only if it still is.
           # A name recorded again once it exists gets its index then (one recorded before it was made).
           "ifindex": {**old.get("ifindex", {}), **{n: i for n in interfaces if (i := _sys_int(n, "ifindex")) >= 0}}}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, path)  # never half a record


@dataclass
class CleanReport:
    processes: list[int] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)
    live_runs: list[str] = field(default_factory=list)  # left alone
    files: list[str] = field(default_factory=list)  # logs of BMv2 switches started outside a run

    def empty(self) -> bool:
        return not (self.processes or self.interfaces or self.namespaces or self.run_dirs or self.files)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_bmv2(cmdline: str) -> bool:
    """simple_switch by what it is, however it was started: p4lang's packages run it by name, a
    wrapper script (as /usr/local/bin/simple_switch here) execs it by its full path."""
    return os.path.basename(cmdline.split(" ", 1)[0]) == "simple_switch"


def _run_dir_of(cmdline: str) -> str | None:
    """The run directory a worker or switch belongs to ("" for one outside any run), None if not ours."""
    ours = f"-m {WORKER_MODULE}" in cmdline or (_is_bmv2(cmdline) and RUN_ROOT in cmdline)
    if not ours:
        return None
    for token in cmdline.split():
        if token.startswith(RUN_ROOT + "/run-"):
            return os.path.join(RUN_ROOT, token[len(RUN_ROOT) + 1:].split("/")[0])
    return ""


def _owner_alive(rec: dict[str, Any]) -> bool:
    """Whether the process a record names as its owner still runs (the same one: pid and start time)."""
    who = rec.get("owner", {})
    return bool(who) and process_start(int(who.get("pid", -1))) == who.get("start")


def _own_record_alive(pid: int, run_dir: str) -> bool:
    """A worker whose run directory this process cannot see in its own /run/emu: one started over ssh
    (`run-...-wN`, made by the worker itself, emu.dataplane.worker) on a machine whose /run/emu is its
    own, as a namespace machine's is though its processes are visible here. Its record is read where
    the worker sees it (/proc/PID/root), and its owner judged: the worker's ssh session. A worker that
    has not written its record yet is judged by its session the same way: its parent, while it has one."""
    try:
        with open(f"/proc/{pid}/root{run_dir}/{RECORD}") as f:
            return _owner_alive(json.load(f))
    except (OSError, ValueError):
        pass
    return _cmdline(pid).rstrip().endswith(" -") and proc_stat(pid, 1) not in (-1, 0, 1)


def worker_pids(exclude_runs: set[str] = frozenset(), only_run: str | None = None,  # type: ignore[assignment]
                *, seen_runs: set[str] | None = None) -> list[int]:
    """Engine workers and BMv2 switches of ours, but for those of the runs in `exclude_runs`; with
    `only_run`, only that run's. With `seen_runs` (the run directories this process's /run/emu has),
    a worker of a run not among them is left out while its own record says its owner lives
    (_own_record_alive): a live cluster run's worker on a machine of its own is not ours to judge."""
    me = os.getpid()
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != me:
            run_dir = _run_dir_of(_cmdline(int(p)))
            if run_dir is None or run_dir in exclude_runs or only_run not in (None, run_dir):
                continue
            if seen_runs is not None and run_dir and run_dir not in seen_runs and _own_record_alive(int(p), run_dir):
                continue
            out.append(int(p))
    return out


# Mininet names a link's ends NODE-ethPORT.
_LINK_NAME = re.compile(r"^[A-Za-z0-9_.]+-eth[0-9]+$")


def _is_veth(name: str) -> bool:
    """A veth's iflink is its peer's ifindex; a physical or other virtual device's is its own."""
    try:
        with open(f"/sys/class/net/{name}/iflink") as a, open(f"/sys/class/net/{name}/ifindex") as b:
            return a.read().strip() != b.read().strip() and not os.path.exists(f"/sys/class/net/{name}/device")
    except OSError:
        return False


def _ours(cmdline: str) -> bool:
    """A process the emulator starts: a node shell, or a module of ours (-P -m emu.*), or simple_switch."""
    return "mininet:" in cmdline or " -m emu." in cmdline or _is_bmv2(cmdline)


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


def _sys_int(name: str, field: str) -> int:
    """An interface's integer attribute from sysfs (ifindex, iflink, netdev_group); -1 if it is gone."""
    try:
        with open(f"/sys/class/net/{name}/{field}") as f:
            return int(f.read())
    except (OSError, ValueError):
        return -1


def _group_owner_alive(name: str) -> bool:
    """Whether the process that took the device group of interface `name`, or of its veth peer here
    (a pair's group is set on one end), still runs."""
    names = [name]
    mine, peer = _sys_int(name, "ifindex"), _sys_int(name, "iflink")
    if peer not in (-1, mine):  # a veth: its peer is the one here that links back (not a namesake index elsewhere)
        names += [n for n in os.listdir("/sys/class/net")
                  if n != name and _sys_int(n, "ifindex") == peer and _sys_int(n, "iflink") == mine]
    for n in names:
        group = _sys_int(n, "netdev_group")
        pid = group_pid(group) if group >= 0 else None
        if pid is not None and os.path.exists(f"/proc/{pid}"):
            return True
    return False


def root_interfaces() -> list[str]:
    with Netlink.here() as nl:
        return [li.name for li in nl.links()]


def _records() -> list[tuple[str, dict[str, Any], bool]]:
    """(run directory, its record, whether its owner is alive) for every run directory."""
    out = []
    if os.path.isdir(RUN_ROOT):
        for d in sorted(x for x in os.listdir(RUN_ROOT) if x.startswith("run-")):
            path = os.path.join(RUN_ROOT, d)
            try:
                with open(os.path.join(path, RECORD)) as f:
                    rec = json.load(f)
            except (OSError, ValueError):
                rec = {}
            out.append((path, rec, _owner_alive(rec)))
    return out


def clean() -> CleanReport:
    report = CleanReport()
    records = _records()
    live = {path for path, _, alive in records if alive}
    live_ifs = {i for _, rec, alive in records if alive for i in rec.get("interfaces", [])}
    live_pids = {p for _, rec, alive in records if alive for p in rec.get("pids", [])}
    dead_ifs: set[str] = set()
    moved: set[str] = set()  # recorded names now on another interface: someone else's
    dead_pids: list[int] = []
    dead_netns: set[str] = set()
    for path, rec, alive in records:
        if alive:
            report.live_runs.append(path)
            continue
        dead_ifs.update(rec.get("interfaces", []))
        moved.update(n for n, i in rec.get("ifindex", {}).items() if _sys_int(n, "ifindex") not in (i, -1))
        dead_pids += [p for p in rec.get("pids", []) if "mininet:" in _cmdline(p)]
        dead_netns.update(rec.get("netns", []))
        report.run_dirs.append(path)
    # A switch outside any run (a bench's, a test's) is known by its namespace's owner.
    held = {p for n in list_project_namespaces() if _held(n, live) for p in namespace_pids(n)}
    seen = {path for path, _, _ in records}
    report.processes += _kill([p for p in worker_pids(exclude_runs=live, seen_runs=seen) if p not in held])
    report.processes += _kill(dead_pids)
    # Node shells whose Mininet died: orphaned to init, and no live run's.
    me = os.getpid()
    orphans = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me and int(p) not in live_pids
               and "mininet:" in _cmdline(int(p)) and proc_stat(int(p), 1) == 1]
    report.processes += _kill(orphans)
    if dead_netns:
        live_netns = {n for _, rec, alive in records if alive for n in rec.get("netns", [])}
        doomed_ns = dead_netns - live_netns  # namespace ids are reused: a live run's is not ours to empty
        # Only our own processes in them (endpoints, ranks, traffic outliving their shell): an id reused
        # by someone else's namespace, or named by a stale record, costs that namespace nothing.
        report.processes += _kill([int(p) for p in os.listdir("/proc")
                                   if p.isdigit() and int(p) != me and netns_id(int(p)) in doomed_ns
                                   and _ours(_cmdline(int(p)))])
    # Our modules (traffic, ranks, endpoints) running in a namespace no live run holds, whatever
    # recorded it or not: their fabric is gone (the record with it), and they keep its namespace.
    # Not in the namespace of another "machine" either: on a machine of a namespace cluster, its peers' and
    # the controller's processes are visible too.
    live_netns = {n for _, rec, alive in records if alive for n in rec.get("netns", [])}
    spare = {netns_id(me), "", *live_netns, *_scratch_netns(alive=True, what=SCRATCH_SPARE)}
    report.processes += _kill([int(p) for p in os.listdir("/proc")
                               if p.isdigit() and int(p) != me and " -m emu." in _cmdline(int(p))
                               and netns_id(int(p)) not in spare])
    # Namespaces a live process holds through its scratch folder (a namespace cluster's machines) stay.
    held_ns = _scratch_netns(alive=True)
    namespaces = [n for n in list_project_namespaces() if not _held(n, live) and named_netns_id(n) not in held_ns]
    for ns in namespaces:
        report.processes += _kill(namespace_pids(ns))
    present = set(root_interfaces())
    # A dead run's interface goes only if it is still the one recorded (same ifindex) or, named before
    # it was made (a crash mid-build), if it looks like one of its links: a veth called NODE-ethN.
    recorded = {n for _, rec, alive in records if not alive for n in rec.get("ifindex", {})}
    dead_ifs = {n for n in dead_ifs if n in recorded or (_LINK_NAME.match(n) and _is_veth(n))}
    held_ifs = _scratch_netns(alive=True, what=SCRATCH_IFS)
    # Root interfaces called emu* that no record names (a crash before its record): only those whose
    # device group's owner (netlink.new_group: its pid) is gone, or that have no such group.
    unrecorded = {n for n in present if n.startswith("emu") and not _group_owner_alive(n)}
    doomed = sorted(((dead_ifs & present) - moved | unrecorded) - live_ifs - held_ifs)
    live_groups = {g for _, rec, alive in records if alive for g in rec.get("groups", [])}
    dead_groups = {g for _, rec, alive in records if not alive for g in rec.get("groups", [])} - live_groups
    with Netlink.here() as nl:
        before = {li.name for li in nl.links()}
        for g in sorted(dead_groups):  # a dead fabric's link ends, in one kernel batch each
            nl.delete_group(g)
        after = {li.name for li in nl.links()}
        for n in doomed:
            if n in after:
                try:
                    nl.delete_link(n)
                except NetlinkError:
                    pass
    for ns in namespaces:
        remove_namespace(ns)
    doomed = sorted(set(doomed) | (before - after))
    report.interfaces = doomed
    report.namespaces = namespaces
    # A process that uses a scratch folder whose owner is gone: a headless browser of ours (emu.web.chromium,
    # its profile there), an ssh to a namespace machine (emu.cluster.testbed, its configuration there);
    # and whatever runs in the namespace machines such a folder lists, with its descendants.
    uses = re.compile(rf"{re.escape(SCRATCH)}/([^/\s]+)")
    strays = []
    for p in os.listdir("/proc"):
        m = uses.search(_cmdline(int(p))) if p.isdigit() else None
        if m and not scratch_owner_alive(m.group(1)):
            strays.append(int(p))
    machines = _scratch_netns(alive=False)
    report.processes += _kill(sorted(set(strays) | set(netns_trees(machines) if machines else [])))
    if os.path.isdir(SCRATCH):  # endpoints' and ranks' folders of processes that are gone
        report.run_dirs += [os.path.join(SCRATCH, n) for n in sorted(os.listdir(SCRATCH)) if not scratch_owner_alive(n)]
    for path in report.run_dirs:
        shutil.rmtree(path, ignore_errors=True)
    # Logs of switches started outside a run (a check's, a bench's): once no simple_switch runs at all,
    # nobody's (a switch stopped cleanly removes its own; these are a killed one's).
    if os.path.isdir(BMV2_LOG_DIR) and not any(_is_bmv2(_cmdline(int(p))) for p in os.listdir("/proc")
                                               if p.isdigit()):
        for name in sorted(os.listdir(BMV2_LOG_DIR)):
            path = os.path.join(BMV2_LOG_DIR, name)
            try:
                os.remove(path)
                report.files.append(path)
            except OSError:
                pass
    report.files += faketime_leftovers()
    return report


FAKETIME_FILE = re.compile(r"(?:faketime_shm_|sem\.faketime_sem_)(\d+)$")


def _maps_faketime(pid: int) -> bool:
    """Whether process `pid` runs with libfaketime loaded (a PID reused by another process does not)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "faketime" in f.read()
    except OSError:
        return False


def faketime_leftovers(shm: str = "/dev/shm") -> list[str]:
    """Remove what libfaketime left of processes that are gone. A dilated process (emu.net.ranks) that
    starts its clock makes /dev/shm/faketime_shm_PID (and a semaphore) for its children to share the
    clock's start, and removes them only at a normal exit: a rank killed (a timeout, a signal) leaves them.
    A later process that gets the same PID then cannot make its own, and its children each start their
    clocks afresh (two `date`s 2 ms apart read 2 s apart at D = 1000: a fresh clone's suite, with 4316 of
    these left). Only files of PIDs whose process is gone, or is another that has no libfaketime loaded
    (the PID reused); the paths removed."""
    gone = []
    try:
        names = os.listdir(shm)
    except OSError:
        return gone
    for name in names:
        m = FAKETIME_FILE.match(name)
        if m and not _maps_faketime(int(m[1])):
            try:
                os.remove(os.path.join(shm, name))
                gone.append(os.path.join(shm, name))
            except OSError:
                pass
    return gone


def make_way(names: list[str]) -> str:
    """Before a run makes the interfaces `names`: what dead runs left (their records, or any of these
    names) is removed, and a line saying so returned ("" if there was nothing); a name that a live run
    holds, or that no run of ours made, is refused in one line instead of the kernel's "File exists"."""
    records = _records()
    dead = [os.path.basename(path) for path, _, alive in records if not alive]
    present = set(root_interfaces())
    clash = [n for n in names if n in present]
    if not clash and not dead:
        return ""
    holders = {i: (path, rec) for path, rec, alive in records if alive for i in rec.get("interfaces", [])}
    for n in clash:
        if n in holders:
            path, rec = holders[n]
            raise ValueError(f"interface {n} belongs to a running fabric ({os.path.basename(path)}, pid "
                             f"{rec.get('owner', {}).get('pid', '?')}): stop it first")
    report = clean()
    still = [n for n in clash if n in set(root_interfaces())]
    if still:
        raise ValueError(f"interface {still[0]} already exists and no run of ours made it: delete it "
                         f"(ip link del {still[0]}) or rename your nodes")
    what = [f"{len(report.interfaces)} interfaces" if report.interfaces else "",
            f"{len(report.processes)} processes" if report.processes else ""]
    return (f"removed what a run that did not stop left behind ({', '.join(dead) or 'no record'}: "
            f"{', '.join(w for w in what if w) or 'its record'})")


__all__ = ["clean", "make_way", "netns_trees", "record", "root_interfaces", "worker_pids", "CleanReport", "PREFIX"]
