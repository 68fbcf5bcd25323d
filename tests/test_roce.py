"""MetaRoCE between FPF GPUs: real RoCEv2 on the wire, data checked, spraying, plane failure."""

from __future__ import annotations

import subprocess
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.run import EnginePerf, PerfRun, mininet_popen
from emu.scenarios.dcqcn import ECN as DCQCN_ECN
from emu.scenarios.dcqcn import overlap_rates
from emu.topo.fpf import FPFTopo

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def fpf(planes: int, dilation: float = 10000) -> FabricNet:
    net = FabricNet(FPFTopo(gpus=2, planes=planes, leaves=1), settings=RunSettings(dilation=dilation))
    net.start()
    return net


def test_64mib_write_correct_and_sprayed_evenly(no_leftovers):
    """On the fabric clock (the endpoints inside the engine): the same transport as on the wall clock,
    exact on any machine, in a few seconds instead of tens (at D = 10 000 a loaded CI run marked
    planes down on spurious losses; the wall clock's own path is tested by the plane failure below)."""
    with FabricNet(FPFTopo(gpus=2, planes=8, leaves=1), clock="fabric") as net:
        client, server = EnginePerf(net.engine, net.host_planes("gpu0"), net.host_planes("gpu1"),
                                    nbytes=64 << 20).wait()
    assert server["data_ok"] and client["completions_ok"] == client["completions"] == 64
    per_plane = [p["tx_bytes"] for p in client["planes"]]
    assert max(per_plane) <= 1.1 * min(per_plane), client["planes"]
    assert server["counters"]["bad_icrc"] == 0


@pytest.mark.long
def test_plane_failure_mid_transfer(no_leftovers):
    net = fpf(planes=4)
    try:
        run = PerfRun(mininet_popen(net.get("gpu0")), mininet_popen(net.get("gpu1")), nbytes=16 << 20,
                      dilation=10000, lat_iters=0)
        net.wait_forwarded("p2l0", 1 << 20)  # a quarter of what plane 2 would carry: mid-transfer
        net.fail(plane=2)
        client, server = run.wait()
    finally:
        net.stop()
    assert server["data_ok"] and client["completions_ok"] == client["completions"]
    p2 = client["planes"][2]
    # It failed while carrying its share, not before or after (the leaf's 1 MiB counts headers and ACKs
    # too: about 0.9 MiB of payload).
    assert 1 << 19 <= p2["tx_bytes"] < 3 << 20, p2
    assert not p2["healthy"] and p2["retransmits"] > 0
    assert p2["tx_after_down"] == 0  # after detection only probes went that way
    assert all(p["healthy"] for i, p in enumerate(client["planes"]) if i != 2)


def test_tshark_decodes_rroce_and_every_icrc_matches(tmp_path, no_leftovers):
    net = fpf(planes=1, dilation=1000)
    cap = tmp_path / "roce.pcap"
    try:
        host = net.get("gpu0")
        dump = host.popen(["tcpdump", "-i", "gpu0-eth0", "-w", str(cap), "-U", "--immediate-mode", "udp port 4791"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # tcpdump says "listening on" once its capture is open: from then on nothing sent is missed.
        said = dump.stderr.readline().decode(errors="replace")
        assert "listening on" in said, said
        client, server = PerfRun(mininet_popen(host), mininet_popen(net.get("gpu1")), nbytes=64 << 10,
                                 dilation=1000, lat_iters=1).wait()
        time.sleep(0.5)
        dump.terminate()
        dump.wait()
    finally:
        net.stop()
    assert server["data_ok"]
    out = subprocess.run(["tshark", "-r", str(cap), "-T", "fields", "-e", "infiniband.bth.opcode",
                          "-e", "infiniband.bth.destqp", "-e", "frame.protocols"],
                         capture_output=True, text=True, timeout=60).stdout.split("\n")
    rows = [line.split("\t") for line in out if line]
    assert rows and all("infiniband" in r[2] for r in rows)
    seen = {(int(r[0]), int(r[1], 16)) for r in rows}
    # RDMA WRITE ONLY to the server's QP, ACKNOWLEDGE to the client's: exactly what was sent.
    assert seen == {(0x0A, server["qpn"]), (0x11, client["qpn"])}
    packets = [p for p in rdpcap(str(cap)) if IPv6 in p and BTH in p]
    assert len(packets) == len(rows)
    for p in packets:  # scapy computes the ICRC on its own, masking the variant fields itself
        assert bytes(p[BTH])[-4:] == p[BTH].compute_icrc(b"")


def incast_pair(cc: str, nbytes: int) -> tuple[list[dict], dict, dict]:
    """Two MetaRoCE writers into one 100G port, on the fabric clock: no D to choose, nothing late (on
    the wall clock this needed D = 15 000 and more, and a fresh machine still fell behind: a 32 MiB
    transfer did not complete in 120 s)."""
    net = FabricNet(FPFTopo(gpus=3, planes=1, leaves=1), settings=RunSettings(clock="fabric", ecn=DCQCN_ECN))
    net.start()
    try:
        net.engine.sample_queues([("p0l0", "p0l0-eth3")], 2e-6)
        run = EnginePerf(net.engine, [net.host_planes("gpu0"), net.host_planes("gpu1")], net.host_planes("gpu2"),
                         nbytes=nbytes, cc=cc, lat_iters=0)
        clients, server = run.wait()
        stats = net.engine.stats()
        queue = [q for _, q in net.engine.queue_samples()["p0l0/p0l0-eth3"] if q]
    finally:
        net.stop()
    port = stats["switches"]["p0l0"]["ports"]["p0l0-eth3"]
    port["time_over_kmax"] = sum(q >= DCQCN_ECN[1] for q in queue) / max(1, len(queue))
    port["kernel_frames"] = run.kernel_frames
    return clients, server, port


def test_dcqcn_two_flows_converge_within_20_percent_below_kmax(no_leftovers):
    # 32 MiB, ~3 ms of fabric, tens of CNP cycles (on the wall clock, on-time runs gave 0.91-0.93).
    clients, server, port = incast_pair("dcqcn", 32 << 20)
    assert server["data_ok"] and port["kernel_frames"] == 0
    assert all(c["cnps"] > 0 for c in clients) and server["cnps_sent"] > 0
    a, b = overlap_rates(server["rx_traces"])
    assert min(a, b) >= 0.8 * max(a, b), (a, b)
    assert port["over_kmax"][3] < 0.5 * port["ecn_enqueued"][3]
    assert port["time_over_kmax"] < 0.5  # sampled over time by the engine, not only at arrivals
    # The same incast without congestion control: the queue sits past Kmax (only PFC would stop it).
    _, plain_server, plain = incast_pair("none", 4 << 20)
    assert plain_server["data_ok"]
    assert plain["over_kmax"][3] > 0.5 * plain["ecn_enqueued"][3]
    assert plain["time_over_kmax"] > 0.5


@pytest.mark.parametrize("op", ["allreduce", "alltoall"])
def test_collectives_over_fpf_are_correct(op, no_leftovers):
    from emu.bench.collective import run

    r = run(op, {"gpus": "4", "planes": "2", "leaves": "1", "sizes": "64KiB,256KiB"})
    assert r["wrong"] == 0 and r["nranks"] == 4
    assert all(row["busbw_GBps"] > 0 for row in r["rows"])
