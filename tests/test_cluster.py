"""One fabric over several machines (issue 24): where each node goes, and the namespace machines the
cluster's tests run on."""

from __future__ import annotations

import pytest

from emu.cluster.placement import PlacementError, place
from emu.topo import make_topo


def test_bag_is_split_at_its_long_haul_links_one_region_a_machine():
    p = place(make_topo("bag", {}), ["m1", "m2"])
    assert p.by == "length"
    assert {n[1] for n in p.nodes_on("m1") if n.startswith("b") and not n.startswith("bag")} == {"0"}
    assert {n[1] for n in p.nodes_on("m2") if n.startswith("b") and not n.startswith("bag")} == {"1"}
    assert p.cut and all(d == pytest.approx(250e-6) for _, _, d in p.cut)  # 50 km each: the lookahead
    assert p.lookahead_s == pytest.approx(250e-6)
    one_region = place(make_topo("bag", {"regions": "1", "buildings": "2"}), ["m1", "m2"])
    assert {n[:3] for n in one_region.nodes_on("m1") if n[:2] == "b0"} != {n[:3] for n in one_region.nodes_on("m2")
                                                                           if n[:2] == "b0"}  # buildings apart
    assert one_region.lookahead_s == pytest.approx(10e-6)  # 2 km


def test_fpf_is_split_by_its_leaf_groups_where_cables_differ_else_by_planes():
    """Two leaves a plane: the 100 m leaf-spine cables part the GPUs under leaf 0 from those under leaf 1
    (a lookahead of 0.5 us, fifty times the host cables'); one leaf a plane: planes 0-3 and 4-7."""
    racks = place(make_topo("fpf", {"gpus": "4", "planes": "8", "leaves": "2"}), ["m1", "m2"])
    assert racks.by == "length" and racks.lookahead_s == pytest.approx(0.5e-6)
    assert {n for n in racks.nodes_on("m1") if n.startswith("gpu")} == {"gpu0", "gpu1"}
    p = place(make_topo("fpf", {"gpus": "4", "planes": "8", "leaves": "1"}), ["m1", "m2"])
    assert p.by == "shard"
    planes = {m: {int(n[1]) for n in p.nodes_on(m) if n.startswith("p")} for m in ("m1", "m2")}
    assert planes == {"m1": {0, 1, 2, 3}, "m2": {4, 5, 6, 7}}
    assert len([n for n in p.nodes_on("m1") if n.startswith("gpu")]) == 2  # balanced
    assert all(a.startswith("gpu") or b.startswith("gpu") for a, b, _ in p.cut)  # only host links cross


def test_a_given_placement_is_checked_and_an_impossible_split_is_one_clear_error():
    topo = make_topo("fpf", {"gpus": "2", "planes": "1", "leaves": "1"})
    given = dict.fromkeys(topo.nodes(), "m1")
    assert place(topo, ["m1", "m2"], given).cut == []
    with pytest.raises(PlacementError, match="unknown machines"):
        place(topo, ["m1"], {**given, "gpu0": "m9"})
    with pytest.raises(PlacementError, match="unplaced nodes"):
        place(topo, ["m1"], {n: "m1" for n in given if n != "gpu1"})
    with pytest.raises(PlacementError, match="1 switch group"):
        place(topo, ["m1", "m2"])  # one plane, one shard, every cable alike
    with pytest.raises(PlacementError, match="distinct"):
        place(topo, ["m1", "m1"])


@pytest.mark.root
def test_namespace_machines_run_sshd_and_mininets_cluster_edition_puts_hosts_on_them(no_leftovers):
    """Two machines of namespaces, each its own sshd, on one LAN: the controller logs in to each, each
    reaches the other; Mininet's own RemoteHost (cluster edition, its ssh pointed at the testbed's
    keys) starts a host on m1 and one on m2, each in a namespace of its own inside its machine's."""
    import os

    from mininet.net import Mininet

    from emu.cluster.testbed import NamespaceCluster, TestbedError

    with pytest.raises(TestbedError, match="distinct"):
        NamespaceCluster(["m1", "m1"])
    with NamespaceCluster(["m1", "m2"]) as cluster:
        m1 = cluster.ssh("m1", "readlink /proc/self/ns/net").stdout.strip()
        m2 = cluster.ssh("m2", "readlink /proc/self/ns/net").stdout.strip()
        assert len({m1, m2, os.readlink("/proc/self/ns/net")}) == 3  # two machines, neither this one
        assert "ok" in cluster.ssh("m1", f"ping -c1 -W2 {cluster.address['m2']} >/dev/null && echo ok").stdout
        assert cluster.ssh("m1", "false", check=False).returncode == 1
        with pytest.raises(TestbedError, match="no machine 'm3'"):
            cluster.ssh("m3", "true")
        net = Mininet(host=cluster.remote_host(), controller=None, build=False)
        hosts = [net.addHost(f"h{i}", server=m, serverIP=cluster.address[m]) for i, m in enumerate(("m1", "m2"))]
        try:
            spaces = [os.readlink(f"/proc/{h.pid}/ns/net") for h in hosts]
            assert len(set(spaces) | {m1, m2}) == 4  # each host a namespace of its own
            assert hosts[0].cmd("echo $((6 * 7))").strip() == "42"
            for h, machine in zip(hosts, (m1, m2), strict=True):  # started by the ssh session on its machine
                assert machine in _ancestors_netns(h.pid), (h.name, machine)
        finally:
            for h in hosts:
                h.terminate()


def _ancestors_netns(pid: int) -> set[str]:
    """The network namespaces of a process's ancestors (the machines share this one's pid namespace)."""
    import os

    out = set()
    while pid > 1:
        try:
            out.add(os.readlink(f"/proc/{pid}/ns/net"))
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


@pytest.mark.root
def test_a_killed_testbed_leaves_nothing_once_emu_clean_has_run(no_leftovers):
    """kill -9 of the process that made the machines and a Mininet host on m1: `emu clean` removes the
    namespaces, sshds, LAN and keys, and the ssh session on m1 with the host's shell it started."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from emu.net.cleanup import clean
    from emu.net.netlink import namespace_names

    code = ("from emu.cluster.testbed import NamespaceCluster; import time; c = NamespaceCluster(['m1', 'm2']); "
            "h = c.remote_host()('h1', server='m1', serverIP=c.address['m1']); "
            "print(c.dir, c.lab.ns(0), h.pid, flush=True); time.sleep(600)")
    maker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    folder, ns, shell = maker.stdout.readline().split()  # type: ignore[union-attr]
    maker.send_signal(signal.SIGKILL)
    maker.wait()
    assert ns in namespace_names() and os.path.isdir(folder)
    report = clean()
    assert ns in report.namespaces and folder in report.run_dirs and report.processes  # its sshds
    assert ns not in namespace_names() and not os.path.exists(folder)
    deadline = time.monotonic() + 5  # killed, then reaped
    while (_alive(int(shell)) or _procs_mentioning("mininet:h1")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(shell)) and not _procs_mentioning("mininet:h1")


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _procs_mentioning(text: str) -> list[int]:
    import os

    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if text.encode() in f.read() and _alive(int(p)):
                    out.append(int(p))
        except (OSError, ValueError):
            pass
    return out


BAG = {"regions": 2, "hosts_per_leaf": 1, "leaves": 1, "spines": 1, "rate": "400G", "fabric_rate": "400G",
       "bag_rates": "400G", "distance": "20km"}
REGION_1_SUPER_SPINE = {"bag1x0": "m2", "bag1x1": "m2"}


@pytest.fixture(scope="module")
def bag_alone():
    """BAG on one machine, the fabric clock: the 1 MiB allreduce's time and a 1 MiB write across the long
    haul, the figures a split run must give to the last bit. Made once for the module's tests (a fabric
    brought up and down here, before any of theirs); the fabric clock makes them the same every run."""
    from emu import FabricNet
    from emu.topo.bag import BAGTopo

    with FabricNet(BAGTopo(**BAG), clock="fabric") as net:
        alone = net.collective("allreduce", sizes=["1MiB"]).rows[0].time_us
        write = net.roce.write("h000x0", "h100x0", nbytes=1 << 20)
    return alone, write


@pytest.fixture
def cluster(no_leftovers, monkeypatch):
    """Two namespace machines, m1 and m2, that every ssh of ours reaches (EMU_SSH_CONFIG)."""
    from emu.cluster.testbed import NamespaceCluster

    with NamespaceCluster(["m1", "m2"]) as c:
        monkeypatch.setenv("EMU_SSH_CONFIG", c.config)
        yield c


def _worker_on(machine_ns: str) -> list[int]:
    import os

    return [p for p in _procs_mentioning("emu.dataplane.worker") if os.readlink(f"/proc/{p}/ns/net") == machine_ns]


@pytest.mark.root
@pytest.mark.long
def test_an_engine_worker_on_another_machine_carries_its_switches_and_the_figures_hold(bag_alone, cluster):
    """Region 1's super-spine switches run on m2, started over ssh: its worker listens on m2's LAN
    address, its links to this machine (20 km and the 2 km campus cables) are channels over the LAN.
    Pings cross them between jobs; the allreduce's time is the one-machine run's to the last bit."""
    from emu import FabricNet
    from emu.topo.bag import BAGTopo

    alone, _ = bag_alone
    m2 = cluster.ssh("m2", "readlink /proc/self/ns/net").stdout.strip()
    with FabricNet(BAGTopo(**BAG), clock="fabric", machines=["localhost", "m2"],
                   placement=REGION_1_SUPER_SPINE) as net:
        spec = net.engine.spec
        assert spec.hosts == (cluster.controller, cluster.address["m2"])
        assert {s.name for s in spec.switches if s.worker == 1} == set(REGION_1_SUPER_SPINE)
        assert len(_worker_on(m2)) == 1  # the worker runs on m2, not here
        assert net.pingAll() == 0.0
        r = net.collective("allreduce", sizes=["1MiB"])
        assert r.wrong == 0 and r.fidelity["ok"] and r.rows[0].time_us == alone
    assert not _worker_on(m2)  # stopped with the fabric; its run directory there too (no_leftovers)


@pytest.mark.root
@pytest.mark.long
def test_a_remote_worker_killed_mid_job_is_named_with_its_machine(cluster):
    import os
    import signal
    import threading
    import time

    from emu import FabricNet
    from emu.dataplane.engine import EngineError
    from emu.topo.bag import BAGTopo

    m2 = cluster.ssh("m2", "readlink /proc/self/ns/net").stdout.strip()
    with FabricNet(BAGTopo(**BAG), clock="fabric", machines=["localhost", "m2"],
                   placement=REGION_1_SUPER_SPINE) as net:
        net.engine.on_death = lambda m: None
        (victim,) = _worker_on(m2)
        threading.Thread(target=lambda: (time.sleep(1.0), os.kill(victim, signal.SIGKILL)), daemon=True).start()
        with pytest.raises(EngineError, match=r"engine worker 1 \(on m2\)"):
            net.collective("allreduce", sizes=["64MiB"] * 50)  # far longer than the second it is given


def test_machines_are_checked_before_anything_is_built():
    from emu.net.switch import RunSettings

    with pytest.raises(ValueError, match="BMv2 runs on one machine"):
        RunSettings(machines=("localhost", "m2"), backend="bmv2")
    with pytest.raises(ValueError, match="not in --machines"):
        RunSettings(clock="fabric", machines=("localhost", "m2"), placement={"s1": "m3"})
    with pytest.raises(ValueError, match="each once"):
        RunSettings(clock="fabric", machines=("m2", "m2"))


@pytest.mark.root
@pytest.mark.long
def test_bag_over_two_machines_each_region_with_its_hosts_on_its_own(bag_alone, cluster, tmp_path):
    """`--machines m1,m2`: split at the 50 km links, each region's switches and hosts on one machine,
    this one only the controller. Each host is a namespace on its machine (Mininet's RemoteHost),
    its link made there; each machine's engine worker carries its region; the long-haul links are
    channels between them. Pings cross; the allreduce's and an RDMA write's figures are the
    one-machine run's; each machine captures its own ports, the long-haul ones too."""
    import os

    from emu import FabricNet
    from emu.dataplane.pcap import read_frames
    from emu.topo.bag import BAGTopo

    alone, write = bag_alone
    spaces = {m: cluster.ssh(m, "readlink /proc/self/ns/net").stdout.strip() for m in ("m1", "m2")}
    pcap = tmp_path / "pcap"
    with FabricNet(BAGTopo(**BAG), clock="fabric", machines=["m1", "m2"], pcap_dir=str(pcap)) as net:
        spec = net.engine.spec
        region = {s.name[:2]: s.worker for s in spec.switches if s.name.startswith("b")}
        assert spec.machines == ("m1", "m2") and region["b0"] != region["b1"]
        assert len(_worker_on(spaces["m1"])) == len(_worker_on(spaces["m2"])) == 1
        for h in net.hosts:
            assert spaces[h.server] in _ancestors_netns(h.pid)  # started there, by its ssh session
            assert os.readlink(f"/proc/{h.pid}/ns/net") not in spaces.values()  # a namespace of its own
        assert net.pingAll() == 0.0
        r = net.collective("allreduce", sizes=["1MiB"])
        assert r.wrong == 0 and r.rows[0].time_us == alone
        across = net.roce.write("h000x0", "h100x0", nbytes=1 << 20)
        assert across.data_ok and across.fabric_s == write.fabric_s
        long_haul = [f"{sw}-{i.name}.pcap" for sw in ("bag0x0", "bag1x0") for i in net.get(sw).intfList()
                     if i.link and {i.link.intf1.node.name, i.link.intf2.node.name} == {"bag0x0", "bag1x0"}]
        cable = net.get("h100x0").defaultIntf().link
        leaf_port = next(f"{i.node.name}-{i.name}.pcap" for i in (cable.intf1, cable.intf2) if i.node.name != "h100x0")
        # The control plane across machines: a long-haul link down, traffic rerouted over the others.
        net.fail(link=("bag0x0", "bag1x0"))
        assert net.pingAll() == 0.0 and net.collective("allreduce", sizes=["256KiB"]).wrong == 0
        down = [n for n, p in net.engine.stats()["switches"]["bag1x0"]["ports"].items() if not p["up"]]
        net.restore(link=("bag0x0", "bag1x0"))
        assert len(down) == 1  # on m2's worker, asked from here
        stats = net.engine.stats()
        assert {w["machine"] for w in stats["workers"]} == {"m1", "m2"}
        assert all(p["up"] for p in stats["switches"]["bag1x0"]["ports"].values())
    assert not _worker_on(spaces["m1"]) and not _worker_on(spaces["m2"])
    assert len(long_haul) == 2 and all(len(read_frames(str(pcap / f))) > 0 for f in long_haul)
    assert len(read_frames(str(pcap / leaf_port))) > 0  # the write's frames, at the leaf on m2


@pytest.mark.root
@pytest.mark.long
def test_fpf_by_planes_over_two_machines_cuts_the_host_cables(cluster):
    """One leaf a plane: plane 0 on m1, plane 1 on m2, each GPU on one of them with a cable to each
    plane's leaf. A cable to the other machine's leaf is cut: its veth is made on the host's machine,
    whose worker runs the GPU's NIC toward that leaf and hands its frames over the LAN (a lookahead of
    the 2 m cable, 10 ns). Pings and the collective cross; the collective is right, within 1 % of one
    machine's time (equal-time events may run in another order); the cut NICs are counted."""
    from emu import FabricNet, FPFTopo

    topo = {"gpus": 4, "planes": 2, "leaves": 1}
    with FabricNet(FPFTopo(**topo), clock="fabric") as net:
        alone = net.collective("allreduce", sizes=["1MiB"]).rows[0].time_us
    spaces = {m: cluster.ssh(m, "readlink /proc/self/ns/net").stdout.strip() for m in ("m1", "m2")}
    with FabricNet(FPFTopo(**topo), clock="fabric", machines=["m1", "m2"]) as net:
        spec = net.engine.spec
        assert {s.name: spec.machines[s.worker] for s in spec.switches} == {"p0l0": "m1", "p1l0": "m2"}
        assert spec.lookahead_ps() == 10_000  # 10 ns
        home = {h.name: h.server for h in net.hosts}
        assert sorted(home.values()) == ["m1", "m1", "m2", "m2"]
        cut = [(h, f"p1l0-eth{i + 1}") for i, h in enumerate(sorted(home)) if home[h] == "m1"]
        # The cut cables' switch ends are on the hosts' machine, not the switch's.
        links = {m: cluster.ssh(m, "ip -o link show").stdout for m in ("m1", "m2")}
        for _, port in cut:
            assert f" {port}@" in links["m1"] and f" {port}@" not in links["m2"]
        assert net.pingAll() == 0.0
        r = net.collective("allreduce", sizes=["1MiB"])
        assert r.wrong == 0 and r.fidelity["ok"]
        assert r.rows[0].time_us == pytest.approx(alone, rel=0.01)
        ports = net.engine.stats()["switches"]["p1l0"]["ports"]
        assert all(ports[port]["host_nic"]["tx_bytes"] > 0 for _, port in cut)  # counted on m1, where they run
        net.fail(link=(cut[0][0], "p1l0"))  # the control plane reaches both ends of a cut cable
        ports = net.engine.stats()["switches"]["p1l0"]["ports"]
        assert not ports[cut[0][1]]["up"]
        net.restore(link=(cut[0][0], "p1l0"))
    assert not _worker_on(spaces["m1"]) and not _worker_on(spaces["m2"])


@pytest.mark.root
def test_a_host_placed_where_none_of_its_switches_runs_is_refused_before_anything_is_built(cluster):
    from emu import FabricNet
    from emu.topo.bag import BAGTopo

    with pytest.raises(ValueError, match="runs none of the fabric's switches"), \
            FabricNet(BAGTopo(**BAG), clock="fabric", machines=["m1", "m2"], placement={"h100x0": "m2"}):
        pass


def test_machines_keep_the_fabric_clock_unless_the_scenario_is_the_wall_clocks():
    from argparse import Namespace

    from emu.cli.main import _clock

    def clock(command: str, name: str = "", given: str | None = None) -> str:
        return _clock(Namespace(clock=given, command=command, backend="native", name=name, machines="m1,m2"))

    assert clock("up") == clock("scenario", "bag-collective") == "fabric"
    assert clock("scenario", "srv6-te") == clock("up", given="wall") == "wall"  # SRv6 policy on the kernel's traffic


OFFSET_S = 0.003  # m2's clock reads this far ahead: as a machine whose PTP failed would


@pytest.fixture
def skewed_cluster(no_leftovers, monkeypatch):
    """m1 and m2 as `cluster`, but what runs on m2 reads the common clock OFFSET_S ahead (the machines share
    this kernel's one clock, so only an injected offset exercises the path a real one would take)."""
    from emu.cluster.testbed import NamespaceCluster

    with NamespaceCluster(["m1", "m2"], clock_offset_s={"m2": OFFSET_S}) as c:
        monkeypatch.setenv("EMU_SSH_CONFIG", c.config)
        yield c


@pytest.mark.root
@pytest.mark.long
def test_the_wall_clock_over_two_machines_counts_their_clocks_agreement(skewed_cluster):
    """On the wall clock the machines' workers cross frames at once, stamped on the machines' common
    clock (CLOCK_REALTIME, which PTP keeps in agreement); each worker measures its peers' clocks at
    connect, and the bound (|offset| + round trip / 2) is one more part of the fidelity verdict: a
    frame between machines lands as late, or as early, as their clocks disagree. m2's clock is made to
    read 3 ms ahead: each side measures it (within the round trip), the bound carries it, and at D = 1000
    (3 us of fabric time, thousands of packet times) the verdict is not ok and names the clocks."""
    from emu import FabricNet
    from emu.fidelity import engine_parts
    from emu.topo.bag import BAGTopo

    with FabricNet(BAGTopo(**BAG), clock="wall", dilation=1000, machines=["m1", "m2"]) as net:
        assert net.engine.spec.channelled and net.engine.spec.machines == ("m1", "m2")
        assert net.pingAll() == 0.0  # late by 3 ms of wall time one way, but delivered
        net.engine.reset_fidelity()
        net.pingAll()
        stats = net.engine.stats()
        verdict = net.verdict()
        collective = net.collective("allreduce", sizes=["256KiB"])
    clocks = [w["channel"]["clocks"] for w in stats["workers"]]
    for mine, sign in zip(clocks, (1, -1), strict=True):  # worker 0 on m1 sees m2 ahead; m2 sees m1 behind
        (c,) = mine.values()
        assert c["samples"] == 16 and c["rounds"] >= 1 and 0 < c["rtt_s"] < 0.05
        assert abs(c["offset_s"] - sign * OFFSET_S) <= c["rtt_s"], c
        assert c["bound_s"] == pytest.approx(abs(c["offset_s"]) + c["rtt_s"] / 2) and c["bound_s"] >= OFFSET_S - c["rtt_s"]
    parts = {p.name: p for p in engine_parts(stats)}
    assert parts["clocks of engine workers 0 and 1"].p99_s == clocks[0]["1"]["bound_s"]
    assert verdict["ok"] is False and any(b.startswith("clocks of engine workers 0 and 1") for b in verdict["behind"]), \
        verdict["behind"]
    # Pings between regions crossed the long haul, both ways, with no windows.
    assert all(w["channel"]["received"] > 0 and w["channel"]["windows"] == 0 for w in stats["workers"])
    # A collective runs inside the engine there too, a part on each machine for the ranks whose hosts it
    # runs, started at one instant of the common clock: data right (the skew makes it late, not wrong).
    assert collective.wrong == 0 and {"engine worker 0", "engine worker 1"} <= {p["name"] for p in collective.fidelity["parts"]}
    assert not any(p["kind"] == "rank" for p in collective.fidelity["parts"])  # no process in a host


def _emu(cluster, *args: str, timeout: float = 600):
    """The emu command, as a user runs it, reaching the cluster's machines (EMU_SSH_CONFIG)."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "emu.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, EMU_SSH_CONFIG=cluster.config), check=False)


@pytest.mark.root
@pytest.mark.long
def test_the_cli_over_two_machines_pingall_and_an_fpf_collective_each_plane_on_both(cluster):
    """The issue's acceptance from the command line: `emu up bag --machines m1,m2 --test pingall`, no loss,
    nothing left; an FPF with its planes on two machines (one leaf a plane: the hosts' cables to the
    other machine's planes cut) runs `emu bench collective` with #wrong 0."""
    import json

    up = _emu(cluster, "up", "bag", "--machines", "m1,m2", "--test", "pingall", "--json")
    assert up.returncode == 0, up.stderr[-800:]
    r = json.loads(up.stdout.strip().splitlines()[-1])
    assert r["pingall"]["ipv4_loss_pct"] == r["pingall"]["ipv6_loss_pct"] == 0 and r["passed"]
    assert not r["left_behind"] and r["pingall"]["received"] == r["pingall"]["sent"] > 0
    bench = _emu(cluster, "bench", "collective", "allreduce", "--machines", "m1,m2", "--json", "--topo", "fpf",
                 "--gpus", "4", "--planes", "2", "--leaves", "1", "--sizes", "256KiB")
    assert bench.returncode == 0, bench.stderr[-800:]
    b = json.loads(bench.stdout.strip().splitlines()[-1])
    assert b["machines"] == ["m1", "m2"] and b["workers"] == 2 and b["wrong"] == 0


@pytest.mark.root
@pytest.mark.long
def test_a_controller_killed_mid_run_leaves_nothing_once_emu_clean_machines_has_run(cluster):
    import os
    import signal
    import subprocess
    import sys

    code = ("from emu import FabricNet; from emu.topo.bag import BAGTopo; import time\n"
            f"net = FabricNet(BAGTopo(**{BAG!r}), clock='fabric', machines=['m1', 'm2']); net.start()\n"
            "print('up', flush=True); time.sleep(600)")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                           env=dict(os.environ, EMU_SSH_CONFIG=cluster.config))
    assert run.stdout.readline().strip() == "up"  # type: ignore[union-attr]
    assert _procs_mentioning("mininet:h100x0")
    # Each machine's /run/emu is its own (as on machines of their own): its worker's run directory is
    # there, out of this machine's reach. Killed with the controller (a power cut, the OOM killer), the
    # workers leave it; this machine's `emu clean` cannot see it, `--machines` removes it.
    assert _run_dirs(cluster, "m1") and _run_dirs(cluster, "m2")
    run.send_signal(signal.SIGKILL)
    for pid in _procs_mentioning("emu.dataplane.worker"):
        os.kill(pid, signal.SIGKILL)
    run.wait()
    local = _emu(cluster, "clean")
    assert local.returncode == 0, local
    left = {m: _run_dirs(cluster, m) for m in ("m1", "m2")}
    assert left["m1"] and left["m2"], left
    out = _emu(cluster, "clean", "--machines", "m1,m2")
    assert out.returncode == 0 and "m1: emu clean:" in out.stdout and "m2: emu clean:" in out.stdout, out
    assert _run_dirs(cluster, "m1") == _run_dirs(cluster, "m2") == [], out.stdout
    assert not _procs_mentioning("mininet:") and not _procs_mentioning("emu.dataplane.worker")


@pytest.mark.root
@pytest.mark.long
def test_emu_clean_spares_a_live_cluster_runs_remote_worker_and_removes_a_killed_runs(cluster):
    """A worker on m2 has its run directory (run-...-w1) in m2's own /run/emu, which this machine's
    `emu clean` cannot list: it reads the worker's record where the worker sees it and leaves a live
    run's worker alone (the fabric pings across it after); a run whose controller is killed -9 is
    cleaned, here and on m2 (`--machines`), its worker gone with its session."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from emu import FabricNet
    from emu.topo.bag import BAGTopo

    m2 = cluster.ssh("m2", "readlink /proc/self/ns/net").stdout.strip()
    with FabricNet(BAGTopo(**BAG), clock="fabric", machines=["localhost", "m2"],
                   placement=REGION_1_SUPER_SPINE) as net:
        worker = _worker_on(m2)
        assert len(worker) == 1 and _run_dirs(cluster, "m2")
        out = _emu(cluster, "clean")
        assert out.returncode == 0, out
        assert _worker_on(m2) == worker, out.stdout  # not killed
        assert net.pingAll() == 0.0  # and still carrying its switches
    code = ("from emu import FabricNet; from emu.topo.bag import BAGTopo; import time\n"
            f"net = FabricNet(BAGTopo(**{BAG!r}), clock='fabric', machines=['localhost', 'm2'], "
            f"placement={REGION_1_SUPER_SPINE!r}); net.start()\n"
            "print('up', flush=True); time.sleep(600)")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                           env=dict(os.environ, EMU_SSH_CONFIG=cluster.config))
    assert run.stdout.readline().strip() == "up"  # type: ignore[union-attr]
    assert len(_worker_on(m2)) == 1
    run.send_signal(signal.SIGKILL)
    run.wait()
    out = _emu(cluster, "clean")
    assert out.returncode == 0, out
    deadline = time.monotonic() + 10
    while _worker_on(m2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _worker_on(m2)
    out = _emu(cluster, "clean", "--machines", "m2")
    assert out.returncode == 0 and _run_dirs(cluster, "m2") == [], out.stdout


def _run_dirs(cluster, machine: str) -> list[str]:
    """The run directories in machine's own /run/emu."""
    return [d for d in cluster.ssh(machine, "ls /run/emu").stdout.split() if d.startswith("run-")]


@pytest.mark.root
@pytest.mark.mininet
def test_bench_cut_counts_what_a_split_ring_carries_between_machines(no_leftovers):
    """`emu bench cut`: a ring allreduce of S over n ranks, split over two machines by length, crosses the
    cut twice (once each way), each crossing carrying 2(n-1)/n x S of payload: what the cut links count is
    that, plus headers and acknowledgements (under a quarter more), never less."""
    import json
    import subprocess

    from tests.helpers import EMU

    out = subprocess.run([*EMU, "bench", "cut", "--topo", "bag", "--parts", "2", "--size", "1MiB", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.splitlines()[0])
    n, size = r["nranks"], r["allreduce_bytes"]
    payload = 2 * 2 * (n - 1) / n * size
    assert r["wrong"] == 0 and r["cut_links"] > 0 and r["split_by"] == "length", r
    assert payload <= r["crossing_bytes"] < 1.25 * payload, (r["crossing_bytes"], payload)
    assert r["crossing_frames_per_fabric_ms"] == pytest.approx(r["crossing_frames"] / (r["allreduce_fabric_s"] * 1e3))
    bad = subprocess.run([*EMU, "bench", "cut", "--parts", "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "at least 2 machines" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
