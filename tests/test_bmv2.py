"""The BMv2 backend: clear errors without the tools; the fabric on simple_switch where they exist."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from emu.backends.bmv2.switch import Bmv2Error, Bmv2Process, netem_available
from emu.fidelity import EMULATOR_IO
from tests.helpers import on_time

HAVE_BMV2 = shutil.which("simple_switch") is not None and shutil.which("simple_switch_CLI") is not None
HAVE_P4C = shutil.which("p4c-bm2-ss") is not None


def test_missing_program_says_make_p4(tmp_path):
    with pytest.raises(Bmv2Error, match="make p4"):
        Bmv2Process("s1", [], 19090, json_path=str(tmp_path / "nope.json")).check()


def test_invalid_json_is_named(tmp_path):
    bad = tmp_path / "fabric.json"
    bad.write_text("{ not json")
    with pytest.raises(Bmv2Error, match="not valid JSON"):
        Bmv2Process("s1", [], 19091, json_path=str(bad)).check()


def test_missing_binary_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without BMv2, wherever it is installed here
    ok = tmp_path / "fabric.json"
    ok.write_text(json.dumps({}))
    with pytest.raises(Bmv2Error, match="simple_switch not found: install BMv2"):
        Bmv2Process("s1", [], 19092, json_path=str(ok)).check()


needs_bmv2 = pytest.mark.skipif(not (HAVE_BMV2 and HAVE_P4C),
                                reason="needs BMv2 (simple_switch, simple_switch_CLI) and p4c: see README, BMv2")


@pytest.fixture(scope="module")
def compiled():
    subprocess.run(["make", "p4"], check=True)


@needs_bmv2
def test_one_cli_session_answers_batches_larger_than_a_pipe(compiled, no_leftovers):
    """Thousands of commands in one batch (answers far beyond a pipe's 64 KiB), twice, through the
    same simple_switch_CLI; stopping the switch ends the CLI too."""
    proc = Bmv2Process("cli-test", [], 19193)
    proc.start()
    try:
        first = proc.load(["counter_read FabricIngress.rx_port 1"] * 3000)
        cli = proc.cli.proc
        second = proc.load(["register_write FabricIngress.hash_mult 0 12345",
                            "register_read FabricIngress.hash_mult 0"])
        assert first.count("FabricIngress.rx_port[1]= (0 bytes, 0 packets)") == 3000
        assert "hash_mult[0]= 12345" in second
        assert proc.cli.proc is cli  # the same process: no 0.2 s start per batch
        with pytest.raises(Bmv2Error, match="refused"):
            proc.load(["table_add no_such_table drop 1 =>"])
    finally:
        proc.stop()
    assert cli.poll() is not None


def test_switches_hash_with_their_own_odd_multiplier():
    from emu.backends.bmv2.cli import hash_commands

    mults = [int(hash_commands(seed)[0].split()[-1]) for seed in range(8)]
    assert all(m % 2 for m in mults) and len(set(mults)) == 8
    assert hash_commands(3) == hash_commands(3)  # from the seed: the same fabric hashes the same way


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.parametrize("links", ["engine", "netem"] if netem_available() else ["engine"])
def test_fpf_two_planes_pingall_on_bmv2(links, compiled, no_leftovers):
    """netem links only where the kernel has netem (test_wires covers engine links on any kernel)."""
    r = subprocess.run([sys.executable, "-m", "emu.cli.main", "up", "fpf", "--gpus", "3", "--planes", "2",
                        "--backend", "bmv2", "--links", links, "--test", "pingall", "--json"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ping = json.loads(r.stdout)["pingall"]
    assert ping["ipv4_loss_pct"] == 0 and ping["ipv6_loss_pct"] == 0
    assert ping["retried"] <= ping["sent"] // 20, ping  # static neighbours: a first packet has nothing to wait on


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.long
def test_ecn_marks_under_congestion_on_bmv2(compiled, no_leftovers):
    """Two MetaRoCE flows into one port: BMv2's queue passes the threshold and marks CE; the receiver
    answers with CNPs. The links are the engine's, so this holds without netem."""
    from emu.net.fabric import FabricNet
    from emu.net.switch import RunSettings
    from emu.roce.run import PerfRun, mininet_popen
    from emu.topo.fpf import FPFTopo

    net = FabricNet(FPFTopo(gpus=3, planes=1, leaves=1),
                    settings=RunSettings(dilation=5000, backend="bmv2", links="engine", ecn=(30_000, 120_000, 1.0)))
    net.start()
    try:
        clients, server = PerfRun([mininet_popen(net.get("gpu0")), mininet_popen(net.get("gpu1"))],
                                  mininet_popen(net.get("gpu2")), nbytes=4 << 20, dilation=5000, cc="dcqcn",
                                  lat_iters=0, timeout=300).wait()
        port = net.engine.stats()["switches"]["p0l0"]["ports"]["p0l0-eth3"]
        curve = net.engine.ecn_by_depth("p0l0")
    finally:
        net.stop()
    assert server["data_ok"]
    assert port["ecn_marked"] > 0 and server["counters"]["ce_marked"] > 0 and server["cnps_sent"] > 0
    # RED, not a step: Kmin 20 and Kmax 80 packets (30 KB, 120 KB at 1500 B), Pmax 1. Below Kmin
    # nothing is marked; between, the marked fraction grows with depth, as (depth - 20) / 60.
    def fraction(lo: int, hi: int) -> tuple[float, int]:
        seen = sum(curve[d][0] for d in range(lo, hi + 1))
        return sum(curve[d][1] for d in range(lo, hi + 1)) / max(1, seen), seen

    below, n_below = fraction(0, 20)
    low, n_low = fraction(24, 38)  # expected about 0.07-0.30, mean near 0.18
    high, n_high = fraction(42, 62)  # expected about 0.37-0.70, mean near 0.53
    assert n_below > 0 and below == 0, curve
    # DCQCN keeps the queue low, so the upper band sees few packets (41 in one run): 20 is enough
    # to tell a curve from a step (a step at Kmin would mark all of both bands).
    assert n_low >= 50 and n_high >= 20, curve
    assert 0.05 < low < 0.35 < high < 0.8, (low, high, curve)


@pytest.mark.root
@pytest.mark.mininet
def test_static_neighbours_cover_gateways_and_same_subnet_hosts_only(no_leftovers):
    """What stands in for ARP and NDP on BMv2, checked on a fabric built without it."""
    from emu.backends.bmv2.switch import _static_neighbours
    from emu.net.fabric import FabricNet
    from emu.net.switch import RunSettings
    from emu.topo.fpf import FPFTopo

    net = FabricNet(FPFTopo(gpus=4, planes=2, leaves=2), settings=RunSettings())
    net.start()
    try:
        _static_neighbours(tuple(net.switches))
        table = net.get("gpu0").cmd("ip neigh show nud permanent; ip -6 neigh show nud permanent")
        gpu0 = net.get("gpu0")
        leaf_port = next(i.MAC() for i in net.get("p1l0").intfList()
                         if i.link is not None and gpu0 in (i.link.intf1.node, i.link.intf2.node))
    finally:
        net.stop()
    rows = {line.split()[0]: line.split() for line in table.splitlines() if "lladdr" in line}
    # Plane 1: the gateway and gpu1 (same leaf, same /24 and /64), both at the leaf port's MAC.
    for addr in ("10.1.0.1", "10.1.0.3", "fdfa:1:0::1", "fdfa:1:0::3"):
        assert addr.replace(":0::", "::") in rows, (addr, table)
    assert rows["10.1.0.3"][rows["10.1.0.3"].index("lladdr") + 1] == leaf_port
    assert not any(a.startswith(("10.0.1.", "10.1.1.", "fdfa:0:1::", "fdfa:1:1::")) for a in rows)  # other leaf


@pytest.mark.root
def test_netem_refused_by_the_kernel_is_one_error_naming_the_interface(no_leftovers):
    from emu.backends.bmv2.switch import _netem_link, netem_available
    from emu.net.netlink import Netlink

    if netem_available():
        pytest.skip("this kernel has netem")
    with Netlink.here() as nl:
        nl.add_veth("emutcx0", "emutcx1")
        try:
            with pytest.raises(Bmv2Error, match="tc netem on emutcx0 failed"):
                _netem_link("emutcx0", rate_bps=100e9, delay_s=5e-6, dilation=1000)
        finally:
            nl.delete_link("emutcx0")


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.parametrize("backend", ["native", "bmv2"])
@pytest.mark.long
def test_incast_is_lossless_with_pfc_and_loses_without_on_both_backends(backend, compiled, tmp_path, no_leftovers,
                                                                        request):
    """The same 5:1 incast into a 256 KiB port buffer, the same verdicts on the engine and on BMv2. On BMv2
    pfc_frames is what fabric.p4's own counters say it sent (nothing else makes pause frames there), and
    paused time is what the engine's wire boxes, the ports' MACs, held the paused class for. On BMv2 each
    sender sends 256 KiB rather than the engine's 512 KiB: still five buffers' worth into one port (the
    verdicts do not depend on how many more), at half the wall time (BMv2 runs at 20 000 or 80 000)."""
    from dataclasses import replace

    from emu.net.switch import RunSettings
    from emu.scenarios import run_scenario

    each = (512 if backend == "native" else 256) << 10
    if backend == "native":  # the same run as test_scenarios' (conftest), made once
        (on, off) = (request.getfixturevalue("incast_native")[0][pfc] for pfc in (True, False))
    else:
        base = RunSettings(backend=backend, links="engine", buffer_per_port=256 << 10)
        params = {"senders": "5", "bytes": f"{each >> 10}KiB"}
        # At D = 20 000, or 4x that where the run was late: a slower machine's late run is judged, not asserted on.
        # The run without PFC is the same fabric and senders: where the run with it was late at 20 000, it
        # starts at 4x (on this 2-core machine 20 000 was late every time: a run of 9 s saved).
        tried: list[float] = []

        def run(pfc: bool) -> Callable[[float], dict]:
            return lambda d: (tried.append(d), run_scenario("incast", params, replace(base, pfc=pfc), dilation=d,
                                                            out_dir=str(tmp_path)))[1]

        on = on_time(run(True), 20000)
        off = on_time(run(False), 20000, known_late=tried[-1] > 20000)
    assert on["planned_bytes"] == off["planned_bytes"] == 5 * -(-each // 1400) * 1400  # whole datagrams
    assert on["delivered_bytes"] == on["planned_bytes"] and on["drops_lossless"] == 0 and on["passed"]
    assert on["pfc_frames"] > 0 and on["paused_fabric_s"] > 0
    assert off["delivered_bytes"] < off["offered_bytes"] and off["pfc_frames"] == 0
    lost = (off["offered_bytes"] - off["delivered_bytes"]) // 1400
    if backend == "bmv2":  # inside simple_switch's queues, found from its counters
        # The hosts' processes report wall seconds; what is handed up is fabric time (D applied once, in
        # emu.net.flows): with PFC the hot port drains at its line rate, so the receiver's goodput is about the
        # bound (a wall-second duration would read D = 20 000 times too slow; the fabric clock's native twin
        # is held to its recorded figures by test_cores).
        assert on["goodput_bound_bps"] / 4 < on["goodput_fabric_bps"] < 2 * on["goodput_bound_bps"], on
        # Every loss has its place: simple_switch's queues (its counters, in less out), on the way in
        # ("p4_input": handed over by the port's MAC, never seen by its ingress counter) or out ("p4_output").
        # Those counters count every packet, and the hosts' own few (MLD, neighbour discovery: 3 or 4 a
        # host) share the queues with the datagrams, so the two sums differ by a handful: -2 to +4 seen
        # here over 6 runs; before p4_input was read, CI found 1193 of 1194 and this machine 1189 of 1193.
        assert abs(sum(off["drops_by_reason"].values()) - lost) <= 6, (lost, off["drops_by_reason"])
        assert off["drops_by_reason"]["p4_queue"] >= 0.99 * lost
    else:
        assert off["drops_lossless"] == lost


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
def test_a_late_bmv2_run_is_judged_not_ok_naming_what_fell_behind(compiled, tmp_path, no_leftovers):
    """Issue 50, item 5: at a D no machine of this kind keeps (50: a 1400 B frame's 112 ns at 100G is
    5.6 us of wall), the incast on BMv2 is judged NOT OK, naming the engine's worker (its wire boxes) and
    the senders that fell behind, whatever its figures happened to be: a late run is never passed as the
    fabric's, nor failed as if the fabric had failed."""
    from emu.net.switch import RunSettings
    from emu.scenarios import run_scenario

    settings = RunSettings(backend="bmv2", links="engine", buffer_per_port=256 << 10)
    r = run_scenario("incast", {"senders": "5", "bytes": "256KiB"}, settings, dilation=50, out_dir=str(tmp_path))
    fid = r["fidelity"]
    assert fid["ok"] is False and r["dilation"] == 50
    assert "engine worker 0" in fid["behind"] and any(b.startswith("traffic sender") for b in fid["behind"])


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.parametrize("backend", ["native", "bmv2"])
@pytest.mark.parametrize(("scenario", "params", "dilation"), [
    ("srv6-te", {"packets": "100"}, 1000),
    ("plane-down", {"planes": "2", "bytes": "1MiB"}, 10000),  # time left after the trigger, even on a slow BMv2
    ("wcmp", {"flows": "1024", "bytes": "2MiB"}, 10000),  # 256 over 512 KiB: sampling error 0.08
    ("roce-plane-down", {"planes": "4", "bytes": "2MiB"}, 200000),
])
@pytest.mark.long
def test_the_same_scenario_verdict_on_both_backends(scenario, params, dilation, backend, compiled, tmp_path,
                                                    no_leftovers, request):
    """The control plane is one; only the data plane differs. A policy steers the flow the same way
    (the path proven from each backend's counters), a failed plane is left the same way, a flap is
    damped the same way (BMv2's table updates go through one long-lived CLI per switch: a fresh
    one per round took 0.2 s of wall time, enough fabric time to change what damping folds)."""
    from emu.net.switch import RunSettings
    from emu.scenarios import run_scenario, scenario_class

    # The native engine runs a scenario whose traffic is all its own on the fabric clock (exact, seconds);
    # BMv2 keeps wall time, at the D given.
    fabric = backend == "native" and scenario_class(scenario).fabric_clock
    settings = RunSettings(backend=backend, links="engine" if backend == "bmv2" else "auto",
                           clock="fabric" if fabric else "wall")
    if (scenario, backend) == ("wcmp", "native"):  # the same run as test_scenarios' (conftest), made once
        r = request.getfixturevalue("wcmp_native")
    else:
        r = run_scenario(scenario, params, settings, dilation="auto" if fabric else dilation, out_dir=str(tmp_path))
    lost_to_emulator = False
    if scenario == "wcmp":  # what the verdict is made of, before the verdict: a failure then says which
        failed = r["after_failure_of_bag0x0-bag1x0"]
        assert r["max_share_error"] < 0.1, r["paths"]
        assert failed["max_share_error"] < 0.1, failed["paths"]
        # Everything arrives, or what did not was lost in the emulator's own I/O, never in a switch queue:
        # CI once lost 31 of 1498 datagrams after the failure on BMv2 (3 runs here after: none).
        for phase in (r, failed):
            if phase["delivered_bytes"] != phase["planned_bytes"] and backend == "bmv2":
                assert phase["drops_by_reason"] and set(phase["drops_by_reason"]) <= set(EMULATOR_IO), phase
                lost_to_emulator = True  # the verdict's "nothing lost" was the emulator's to break, and it says so
            else:
                assert phase["delivered_bytes"] == phase["planned_bytes"], phase
    if lost_to_emulator:  # "everything delivered" was the emulator's to break: the rest of the verdict must hold
        assert r["flap_with_damping"]["route_updates"] < r["flap_without_damping"]["route_updates"], r
    else:
        assert r["passed"], r
    if scenario == "srv6-te":
        assert r["routers_crossed"] == {"shortest": ["r0", "r1", "r2"], "policy": ["r0", "r2", "r3", "r4"],
                                        "restored": ["r0", "r1", "r2"]}
    if scenario == "wcmp":
        # Three changes: without damping each is its own round; with it, one round for the flap.
        assert r["flap_without_damping"]["recomputes"] == 3, r["flap_without_damping"]
        assert r["flap_with_damping"]["recomputes"] == 1, r["flap_with_damping"]
    if scenario == "roce-plane-down":
        # The sender steered around the failed plane the same way: marked down, nothing but probes
        # sent over it afterwards, the data whole.
        assert r["data_ok"] and r["failed_plane_marked_down"]
        assert r["data_packets_on_failed_plane_after_detection"] == 0 and r["retransmits"] > 0


@needs_bmv2
@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.long
def test_a_bmv2_collective_is_never_judged_better_than_unknown(compiled, no_leftovers):
    """Issue 27, item 2: simple_switch keeps no schedule it could report against, so a BMv2 collective's
    verdict is unknown (the README says so), --strict exits 3, and auto D learns nothing from it."""
    r = subprocess.run([sys.executable, "-m", "emu.cli.main", "bench", "collective", "allreduce", "--backend", "bmv2",
                        "--topo", "fpf", "--gpus", "2", "--planes", "1", "--sizes", "64KiB", "--dilation", "100000",
                        "--json", "--strict"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 3, r.stderr[-2000:]
    result = json.loads(r.stdout.splitlines()[0])
    assert result["wrong"] == 0 and result["clock"] == "wall"
    # Unknown, or not ok if a part of ours also fell behind; never ok.
    assert result["fidelity"]["ok"] is not True and result["fidelity"]["missing"] == ["BMv2 simple_switch"]


@needs_bmv2
def test_thrift_is_reachable_only_inside_the_switch_namespace(compiled, no_leftovers):
    """Two switches on BMv2's default Thrift port while this namespace listens on it too: each
    answers its own CLI, from inside its own namespace; nothing of theirs listens here, so what
    connects to 9090 from the machine's network reaches our listener, not a switch's tables."""
    from emu.net.cleanup import switch_namespace
    from emu.net.netlink import namespace_names

    with socket.socket() as mine:
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        mine.bind(("0.0.0.0", 9090))
        mine.listen(4)
        a, b = Bmv2Process("iso-a", [], device_id=1), Bmv2Process("iso-b", [], device_id=2)
        try:
            a.start()
            b.start()
            names = {a.namespace, b.namespace}
            assert names <= set(namespace_names())
            assert a.namespace == switch_namespace("iso-a", a.log_dir) != b.namespace
            for sw in (a, b):
                sw.load([f"register_write FabricIngress.hash_mult 0 {sw.device_id}"])
                assert f"hash_mult[0]= {sw.device_id}" in sw.load(["register_read FabricIngress.hash_mult 0"])
                argv = open(f"/proc/{sw.proc.pid}/cmdline").read().split("\0")
                assert argv[argv.index("--device-id") + 1] == str(sw.device_id)
                assert os.readlink(f"/proc/{sw.proc.pid}/ns/net") != os.readlink("/proc/self/ns/net")
            with socket.create_connection(("127.0.0.1", 9090), timeout=5):
                conn, _ = mine.accept()  # ours answered: no switch is bound in this namespace
                conn.close()
            listeners = {int(row.split()[1].rsplit(":", 1)[1], 16) for t in ("tcp", "tcp6")
                         for row in open(f"/proc/self/net/{t}").read().splitlines()[1:] if row.split()[3] == "0A"}
            assert 9090 in listeners and set(range(9091, 9100)).isdisjoint(listeners)
        finally:
            a.stop()
            b.stop()
    assert not names & set(namespace_names())
    from emu.net.cleanup import BMV2_LOG_DIR

    assert not [n for n in os.listdir(BMV2_LOG_DIR) if "iso-" in n]  # stopped cleanly: its logs went with it


@pytest.mark.root
@needs_bmv2
def test_a_killed_switchs_logs_outside_a_run_are_cleaned_once_no_switch_runs(compiled, no_leftovers):
    """A switch started outside any run (a check's, a bench's) and killed leaves its logs; `emu clean`
    removes them, and only once no simple_switch runs (a running one's log is somebody's)."""
    from emu.net.cleanup import BMV2_LOG_DIR, clean

    sw = Bmv2Process("logs-k", [], device_id=3)
    sw.start()
    mine = sorted(n for n in os.listdir(BMV2_LOG_DIR) if n.startswith("bmv2-logs-k"))
    assert mine
    os.killpg(sw.proc.pid, 9)
    sw.proc.wait()
    sw.proc = None
    try:
        report = clean()
        assert {os.path.join(BMV2_LOG_DIR, n) for n in mine} <= set(report.files)
        assert not [n for n in os.listdir(BMV2_LOG_DIR) if n.startswith("bmv2-logs-k")]
    finally:
        sw.stop()  # its namespace: held by this (live) process, so clean() left it to its owner


def _engine_link_veths() -> set[str]:
    """The root namespace's BMv2 engine-link veths (emu.backends.bmv2.links.wire_name: emub*, emuw*)."""
    return {n for n in os.listdir("/sys/class/net") if n.startswith(("emub", "emuw"))}


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.long
def test_emu_clean_spares_a_live_bmv2_runs_engine_links_and_removes_a_killed_ones(compiled, no_leftovers):
    """The engine-link veths are in their run's record: `emu clean` while the run lives leaves them (it
    pings across them after), and once the run is killed -9 removes them (and the rest: no_leftovers)."""
    import signal

    from tests.helpers import Live

    args = ("fpf", "--gpus", "2", "--planes", "1", "--backend", "bmv2", "--links", "engine")
    before = _engine_link_veths()
    live = Live(*args)
    try:
        assert "0.0% loss" in live.do("pingplanes")
        mine = _engine_link_veths() - before
        assert mine, "the run made no engine-link veths"
        r = subprocess.run([sys.executable, "-m", "emu.cli.main", "clean"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert mine <= _engine_link_veths(), sorted(mine - _engine_link_veths())
        assert "0.0% loss" in live.do("pingplanes")
    finally:
        assert live.close() == 0
    killed = Live(*args)
    assert "0.0% loss" in killed.do("pingplanes")
    mine = _engine_link_veths() - before
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait(30)
    assert mine <= _engine_link_veths()  # a kill -9 leaves them
    r = subprocess.run([sys.executable, "-m", "emu.cli.main", "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not mine & _engine_link_veths(), sorted(mine & _engine_link_veths())


def test_notifications_socket_goes_in_the_run_folder(tmp_path):
    """Where the build has nanomsg, each switch's notifications socket is its own, in its folder."""
    sw = Bmv2Process("s7", [(1, "emub-x")], log_dir=str(tmp_path), device_id=7)
    cmd = sw.command(notifications=True)
    addr = cmd[cmd.index("--notifications-addr") + 1]
    assert addr == f"ipc://{tmp_path}/bmv2-s7-notifications.ipc"
    assert cmd[cmd.index("--device-id") + 1] == "7" and "1@emub-x" in cmd
    assert "--notifications-addr" not in sw.command(notifications=False)



@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.long
def test_trimming_on_bmv2_cuts_in_egress_and_the_receivers_nack_every_cut(compiled, tmp_path, no_leftovers):
    """Issue 23: `emu scenario trimming --backend bmv2 --links engine` runs; fabric.p4 cuts in egress
    (BMv2's own counter), the cut frames reach the receivers' kernels with a valid UDP checksum (they
    are NACKed: every one whose packet had not arrived whole), every byte arrives. BMv2 drops a full queue in its traffic manager before
    egress can cut: a timer may fire then, and the verdict allows it only where such drops were
    counted (docs/p4.md)."""
    from emu.net.switch import RunSettings
    from emu.scenarios import run_scenario

    # 64 KiB a writer and no victims at D = 10 000: each timer a run waits for (where BMv2 dropped before
    # egress could cut) is 2 s of wall, and 128 KiB with two victims took 55 s to 158 s by how many there were.
    # BMv2's verdict cannot say whether simple_switch kept up (it reports no lateness): once in some runs
    # (1 of 4 on 2026-12-05) the incast built no egress queue at D = 10 000, so nothing was cut; once (a
    # fresh clone's check-long, 2026-12-06, after the whole suite) a receiver's timer fired where nothing
    # was dropped, a frame later than its timer allows. Either way the run is made again at four times the
    # D, where simple_switch has four times the wall time a packet.
    for d in (10000, 40000):
        r = run_scenario("trimming", {"senders": "4", "victims": "0", "bytes": "64KiB"},
                         RunSettings(backend="bmv2", links="engine"), dilation=d, out_dir=str(tmp_path))
        t = r["trim"]["incast"]
        if t["trims"] and (t["timeouts"] == 0 or t["drops_by_reason"]):
            break
    trim = r["trim"]["incast"]
    assert all(r[w]["data_ok"] for w in ("pfc", "lossy", "trim"))
    assert trim["trims"] > 0 and 0 < trim["trim_nacks"] <= trim["trims"] and trim["pfc_frames"] == 0
    assert r["lossy"]["incast"]["trims"] == 0 and r["pfc"]["incast"]["pfc_frames"] > 0
    assert r["passed"], {w: {k: r[w]["incast"][k] for k in ("trims", "trim_nacks", "timeouts", "drops_by_reason")}
                         for w in ("lossy", "trim")}
