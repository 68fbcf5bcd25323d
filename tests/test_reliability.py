"""Reliability and security (issue 12): a dead worker is loud, root runs only our code, bad input is one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from emu import FabricNet, FPFTopo
from emu.dataplane.engine import EngineError
from emu.launch import RUN_ROOT, SCRATCH, scratch_dir
from emu.net.cleanup import netns_id
from tests.helpers import EMU, Live
from tests.test_signals import MOMENTS

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def test_no_process_of_ours_imports_from_the_working_directory(tmp_path, no_leftovers):
    """Issue 12, item 2: a json.py beside the user must not be run, as root, by workers or endpoints."""
    marker = tmp_path / "imported"
    (tmp_path / "json.py").write_text(f"open({str(marker)!r}, 'a').write('x')\nraise ImportError('planted')\n")
    emu_bin = os.path.join(os.path.dirname(sys.executable), "emu")
    for lab in ("planes", "srv6-te"):  # engine workers, MetaRoCE endpoints, UDP traffic
        r = subprocess.run([emu_bin, "lab", "check", lab, "--solution"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists()


SHIM = """import importlib.util, os, sys
with open({mark!r}, "a") as f:
    f.write(" ".join(sys.argv) + "\\n")
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.machinery.PathFinder.find_spec(
    "json", [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(here)])
real = importlib.util.module_from_spec(spec)
sys.modules["json"] = real  # who imported this gets the standard json
spec.loader.exec_module(real)
"""


@pytest.mark.parametrize("pythonpath", [None, "."])
def test_python_m_from_a_users_directory_gives_children_no_import_from_it(pythonpath, tmp_path, no_leftovers):
    """Issue 27, item 7: `python -m emu.cli.main` from a user's folder (and with PYTHONPATH=. too)
    puts that folder on the parent's path; no root child (engine worker, endpoint, traffic) may
    import from it. The planted json.py records who imported it, then hands over the real one."""
    marker = tmp_path / "imported"
    (tmp_path / "json.py").write_text(SHIM.format(mark=str(marker)))
    env = dict(os.environ)
    if pythonpath is not None:  # before whatever the caller had (tools/mutate.py points it at a worktree)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-m", "emu.cli.main", "lab", "check", "planes", "--solution"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    importers = marker.read_text().splitlines()
    assert importers and all(line.split()[0].endswith("emu/cli/main.py") for line in importers), importers


@pytest.mark.parametrize("env, args, says", [
    ({"EMU_DILATION": "abc"}, ["clean"], None),  # a bad environment does not stop a clean-up
    ({"EMU_DILATION": "abc"}, ["up", "fpf", "--gpus", "2", "--planes", "1", "--test", "pingall"], "EMU_DILATION"),
    ({}, ["up", "fpf", "--gpus", "2", "--planes", "1", "--ecn", "200KB,20KB,0.2", "--test", "pingall"], "KMIN < KMAX"),
    ({}, ["up", "fpf", "--gpus", "2", "--planes", "1", "--rate=1e400G", "--test", "pingall"], "not a finite"),
    # Item 8: a pcap folder that cannot be made is said before a run exists (no run record is left:
    # the fixture compares /run/emu's run folders too).
    ({}, ["up", "fpf", "--gpus", "2", "--planes", "1", "--pcap", "/proc/nope", "--test", "pingall"], "--pcap /proc/nope"),
])
def test_bad_values_from_anywhere_are_one_line(env, args, says, no_leftovers):
    r = subprocess.run([*EMU, *args], capture_output=True, text=True, timeout=120, env=dict(os.environ, **env))
    assert "Traceback" not in r.stderr, r.stderr
    if says is None:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0 and says in r.stderr, r.stderr


def test_run_folders_are_root_only_whatever_the_umask(no_leftovers):
    """Issue 12, item 4: at umask 000 the run folder (whose sockets take commands as root) was 0777."""
    live = Live("fpf", "--gpus", "2", "--planes", "1", umask=0)
    try:
        live.do("pingplanes")
        runs = [os.path.join("/run/emu", d) for d in os.listdir("/run/emu") if d.startswith("run-")]
        assert runs
        for d in ["/run/emu", *runs]:
            assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, (d, oct(os.stat(d).st_mode))
        socks = [os.path.join(r, f) for r in runs for f in os.listdir(r) if stat.S_ISSOCK(os.stat(os.path.join(r, f)).st_mode)]
        assert socks and all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in socks), socks
    finally:
        assert live.close() == 0



def test_a_worker_killed_is_named_and_the_healthy_ones_still_take_routes(no_leftovers):
    """Issue 12, item 5: kill -9 one engine worker of a running fabric (on the wall clock, whose workers
    outlive a peer: the links to it go down, as a veth to a dead process would)."""
    with FabricNet(FPFTopo(gpus=4, planes=2, leaves=2, spines=2), dilation=2000, workers=2) as net:
        engine = net.engine
        said: list[str] = []
        engine.on_death = said.append  # by default one line on stderr
        dead = engine.worker_of("p0l0")
        gone = sorted(s.name for s in engine.spec.switches if s.worker == dead)
        alive = sorted(s.name for s in engine.spec.switches if s.worker != dead)
        assert "p0l1" in alive and "p1l1" in alive and "p1s1" in alive, (gone, alive)  # leaf 1 and a spine live
        os.kill(engine.procs[dead].pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not said and time.monotonic() < deadline:  # reported at once, before anyone asks
            time.sleep(0.01)
        assert len(said) == 1 and said == net.deaths, said
        assert said[0].startswith(f"engine worker {dead} (switches {', '.join(gone)}; "), said
        assert said[0].endswith("died (exit -9)") and not any(n in said[0] for n in alive), said
        # Another process (`emu stats`) reads what died from the run folder.
        r = subprocess.run([*EMU, "stats"], capture_output=True, text=True, timeout=60)
        said_there = " ".join(r.stderr.split())
        assert r.returncode != 0 and f"engine worker {dead} (switches" in said_there and "died" in said_there, r.stderr
        with pytest.raises(EngineError, match=f"engine worker {dead} exited") as info:
            net.fail(plane=0)
        log = str(info.value).rsplit("full log: ", 1)[1].rstrip(")")
        assert os.path.exists(log), info.value  # the log it names is there to read
        with pytest.raises(EngineError, match=f"engine worker {dead}"):
            net.stats()
        # Routes on the dead worker's switches could not be pushed: settle() says so, not "settled" ...
        with pytest.raises(RuntimeError, match="did not take their routes"):
            net.control.settle()
        # ... while the healthy worker's switches still reroute (a spine link of theirs down), and the hosts
        # it runs (gpu2 and gpu3, under leaf 1) still reach each other.
        before = net.control.updates
        net.fail(link=("p1l1", "p1s1"))
        with pytest.raises(RuntimeError, match="did not take"):  # the dead worker's still cannot take theirs
            net.control.settle()
        assert net.control.updates > before
        assert " 0% packet loss" in net.get("gpu2").cmd("ping -c2 -W2 10.1.1.3")  # gpu3 on plane 1


@pytest.mark.parametrize("moment", ["veths", "workers", "pings"])
def test_a_run_killed_mid_build_is_cleaned_and_the_next_run_works(moment, no_leftovers):
    """Issue 12, item 1: kill -9 the whole run (its process group) while it builds, at a moment known by
    what exists (a slower machine reaches it later); `emu clean` finds something to remove; a new run."""
    proc = subprocess.Popen([*EMU, "up", "fpf", "--gpus", "8", "--planes", "4", "--test", "pingall"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not MOMENTS[moment]() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, f"the run ended before {moment}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    r = subprocess.run([*EMU, "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "nothing to remove" not in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run([*EMU, "up", "fpf", "--gpus", "4", "--planes", "2", "--test", "pingall", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_clean_leaves_a_live_fabric_alone(no_leftovers):
    """Issue 12, item 3: `emu clean` while another fabric runs removes nothing of it."""
    live = Live("fpf", "--gpus", "2", "--planes", "2")
    try:
        assert "0.0% loss" in live.do("pingplanes")
        r = subprocess.run([*EMU, "clean"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "0.0% loss" in live.do("pingplanes")  # its workers, shells and veths are all still there
    finally:
        assert live.close() == 0


def test_clean_spares_what_a_stale_record_names_but_no_run_of_ours_made(no_leftovers):
    """Issue 12, item 3: a dead run's record naming someone else's veth (not a link's NODE-ethN) and
    someone else's namespace; `emu clean` removes the record, and neither the veth nor the process."""
    subprocess.run(["ip", "link", "add", "xdecoy0", "type", "veth", "peer", "name", "xdecoy1"], check=True)
    subprocess.run(["ip", "netns", "add", "xdecoy"], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", "xdecoy", "sleep", "300"])
    run_dir = os.path.join(RUN_ROOT, "run-decoy")
    dead_scratch = os.path.join(SCRATCH, "roce-4194399.1-x")  # a pid above pid_max: its owner is gone
    live_scratch = scratch_dir("roce")  # this process's: kept
    try:
        deadline = time.monotonic() + 10
        while netns_id(sleeper.pid) in ("", netns_id(os.getpid())) and time.monotonic() < deadline:
            time.sleep(0.01)  # until `ip netns exec` has entered the namespace
        os.makedirs(run_dir, 0o700)
        os.makedirs(dead_scratch, 0o700)
        with open(os.path.join(run_dir, "created.json"), "w") as f:
            json.dump({"owner": {"pid": 4194399, "start": 1}, "interfaces": ["xdecoy0"], "pids": [sleeper.pid],
                       "netns": [netns_id(sleeper.pid)], "hosts": {}}, f)
        r = subprocess.run([*EMU, "clean"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert os.path.exists("/sys/class/net/xdecoy0") and sleeper.poll() is None
        assert not os.path.exists(run_dir) and not os.path.exists(dead_scratch) and os.path.isdir(live_scratch)
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "link", "del", "xdecoy0"], capture_output=True)
        subprocess.run(["ip", "netns", "del", "xdecoy"], capture_output=True)
        for d in (run_dir, dead_scratch, live_scratch):
            shutil.rmtree(d, ignore_errors=True)


def test_clean_removes_an_unrecorded_emu_veth_only_once_its_groups_owner_is_gone(no_leftovers):
    """A root interface called emu* that no run's record names is judged by its device group
    (netlink.new_group: its owner's pid), its own or its veth peer's: a live process's stays."""
    from emu.net.netlink import new_group

    mine, dead = f"emuz{os.getpid() % 100000}a", f"emuz{os.getpid() % 100000}b"
    gone = subprocess.Popen(["true"])
    gone.wait()
    made = []
    try:
        for name, group in ((mine, new_group()), (dead, 0x4000_0000 | 1 << 22 | gone.pid)):
            subprocess.run(["ip", "link", "add", name, "group", str(group), "type", "veth", "peer", "name", name + "p"],
                           check=True)
            made.append(name)
        r = subprocess.run([*EMU, "clean"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        here = set(os.listdir("/sys/class/net"))
        assert {mine, mine + "p"} <= here, r.stdout  # the peer has no group: its pair's end names the owner
        assert not {dead, dead + "p"} & here, r.stdout
    finally:
        for name in made:
            subprocess.run(["ip", "link", "del", name], capture_output=True)


def test_a_fabric_too_big_for_this_machine_is_refused_before_anything_exists(monkeypatch):
    """Issue 12, item 6: the cap comes from this machine's memory and open-file limit, and says so."""
    from emu.topo import common

    monkeypatch.setattr(common, "mem_available", lambda: 512 << 20)
    with pytest.raises(common.TopologyError, match=r"need about .* GiB .* 0\.5 GiB available"):
        FPFTopo(gpus=16, planes=8).check_fits()
    FPFTopo(gpus=2, planes=2).check_fits()  # a small one still fits
    FPFTopo(gpus=16, planes=8).check_fits(kernel=False)  # and the big one without the hosts' kernels
    monkeypatch.setattr(common, "mem_available", lambda: 64 << 30)
    monkeypatch.setattr(common.resource, "getrlimit", lambda _: (1024, 300))
    with pytest.raises(common.TopologyError, match=r"switch ports need \d+ packet sockets.*\(300, `ulimit -Hn`\)"):
        FPFTopo(gpus=16, planes=8).check_fits()
    monkeypatch.setattr(common, "mem_available", lambda: 512 << 20)
    from emu import FabricNet

    before = set(os.listdir("/run/emu")) if os.path.isdir("/run/emu") else set()
    with pytest.raises(common.TopologyError, match="make it smaller"):  # FabricNet asks before making anything
        FabricNet(FPFTopo(gpus=16, planes=8), clock="fabric")
    assert (set(os.listdir("/run/emu")) if os.path.isdir("/run/emu") else set()) == before


@pytest.mark.long
def test_soak_bench_reports_no_leftovers_and_no_failures(no_leftovers):
    """`emu bench soak` in small: a cycle with malformed frames, a run killed -9, no incast (the same
    incast is test_scenarios', and at auto D make demo's)."""
    r = subprocess.run([*EMU, "bench", "soak", "--cycles", "1", "--kills", "1", "--fuzz", "500", "--incasts", "0",
                        "--json"], capture_output=True, text=True, timeout=600)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["passed"], (out["failures"], out["leftovers"], r.stderr[-1000:])
    assert out["leftovers"] == [] and out["failures"] == [] and len(out["kill_at_s"]) == 1
    (fuzz,) = out["fuzz"]
    assert fuzz["dropped"] >= 500 and fuzz["pingall_after_loss_pct"] == 0 and fuzz["engine_alive"]
    assert out["incasts"] == []


def test_rings_shrink_alike_when_a_workers_ports_would_pass_its_budget():
    """Issue 13: rings sized by port count, so that thousands of ports fit in memory."""
    from emu.dataplane.ring import (
        BLOCK,
        FABRIC_PORT_RING,
        HOST_PORT_RING,
        MIN_RING,
        RING_BUDGET,
        ring_sizes,
    )

    assert ring_sizes(128, 32) == (HOST_PORT_RING, FABRIC_PORT_RING)  # FPF 16 x 8: the defaults
    host, fabric = ring_sizes(1000, 500)  # 4 GiB + 1 GiB of defaults against a 1 GiB budget
    assert host < HOST_PORT_RING and fabric < FABRIC_PORT_RING
    assert host % BLOCK == 0 and fabric % BLOCK == 0
    # scaled alike, each to a whole block
    assert abs(fabric / FABRIC_PORT_RING - host / HOST_PORT_RING) < BLOCK / min(HOST_PORT_RING, FABRIC_PORT_RING)
    assert 1000 * host + 500 * fabric <= RING_BUDGET
    assert ring_sizes(10**6, 0)[0] == MIN_RING  # never below a few blocks


def test_a_process_dead_but_not_yet_reaped_owns_nothing():
    """A zombie (dead, its parent not yet told) owns no run: a worker killed on another machine stays one
    until its ssh session reaps it, and `emu clean --machines` once left its run directory as a live
    fabric's (CI, 2026-12-05)."""
    import subprocess
    import time

    from emu.launch import process_start

    child = subprocess.Popen(["sleep", "0.05"])
    assert process_start(child.pid) > 0
    deadline = time.monotonic() + 5
    while process_start(child.pid) > 0 and time.monotonic() < deadline:  # exited, not yet waited for
        time.sleep(0.01)
    assert process_start(child.pid) == -1 and child.poll() == 0  # a zombie until this wait: dead all the same
