"""Operating a running fabric: fail/restore, counters, captures, link fidelity."""

from __future__ import annotations

import io
import subprocess

import pytest
from rich.console import Console

from emu.bench import run_bench
from emu.cli.render import print_stats
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.topo.fpf import FPFTopo

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def ping(net: FabricNet, src: str, dst_ip: str) -> bool:
    return " 0% packet loss" in net.get(src).cmd(f"ping -c2 -i0.1 -W1 {dst_ip}")


def test_fail_and_restore_a_host_link_with_counters_and_pcap(tmp_path, no_leftovers):
    pcap = tmp_path / "pcap"
    net = FabricNet(FPFTopo(gpus=2, planes=2, leaves=1), settings=RunSettings(pcap_dir=str(pcap)))
    try:
        net.start()
        plane1 = "10.1.0.3"  # gpu1 on plane 1
        assert ping(net, "gpu0", plane1)
        net.fail(link=("gpu1", "p1l0"))
        assert not ping(net, "gpu0", plane1)
        assert not ping(net, "gpu1", "10.1.0.2")  # what gpu1 sends into its failed link is dropped there
        assert ping(net, "gpu0", "10.0.0.3")  # plane 0 unaffected
        down = net.engine.stats()["switches"]["p1l0"]["ports"]["p1l0-eth2"]["drops"].get("link_down", 0)
        net.restore(link=("gpu1", "p1l0"))
        assert ping(net, "gpu0", plane1)
        stats = net.engine.stats()
        port = stats["switches"]["p1l0"]["ports"]["p1l0-eth2"]
        # gpu1's two echo requests at least (or, its ARP entry for gpu0 gone stale, its ARP probes instead);
        # not only an MLD report the kernel happened to send in the window, which CI once saw none of.
        assert down >= 2 and port["drops"]["link_down"] >= down, port["drops"]
        out = io.StringIO()
        print_stats(stats, Console(file=out, width=200))
        assert "p1l0-eth2" in out.getvalue() and "D=1000" in out.getvalue()
    finally:
        net.stop()
    cap = pcap / "p1l0-p1l0-eth1.pcap"
    r = subprocess.run(["tshark", "-r", str(cap), "-Y", "icmp", "-T", "fields", "-e", "ip.dst"],
                       capture_output=True, text=True, timeout=60)
    assert plane1 in r.stdout.split()


def test_link_delivers_its_rate_and_round_trip(no_leftovers):
    r = run_bench("link", {"bytes": "2MiB", "pings": "10"}, dilation=2000.0)  # 1000 is at the edge here
    # docs/performance.md records the tight figures; this guards against regressions.
    assert r["rate_error"] < 0.05
    assert r["rtt_error"] < 0.10


def test_fabric_routes_around_a_failed_spine_and_a_plane_can_go_down(no_leftovers):
    net = FabricNet(FPFTopo(gpus=4, planes=2, leaves=2, spines=2))
    try:
        net.start()
        across = ("gpu0", "10.0.1.3")  # leaf 0 to leaf 1 on plane 0
        net.fail(switch="p0s0")
        net.control.settle()
        assert all(ping(net, "gpu0", f"10.0.1.{h}") for h in (2, 3))  # every flow now via p0s1
        assert net.control.updates > 0
        net.restore(switch="p0s0")
        net.fail(link=("p0l0", "p0s1"))
        net.control.settle()
        assert ping(net, *across)
        net.restore(link=("p0l0", "p0s1"))
        net.fail(plane=1)
        assert not ping(net, "gpu0", "10.1.1.3")
        assert ping(net, *across)  # plane 0 carries on
        net.restore(plane=1)
        net.control.settle()
        assert ping(net, "gpu0", "10.1.1.3")
    finally:
        net.stop()
