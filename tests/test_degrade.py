"""Degraded links (issue 26): lossy, slow or long, not dead; seeded, so the same run loses the same frames."""

from __future__ import annotations

import pytest

from emu.dataplane.fabric import VirtualFabric
from tests.helpers import star
from tests.test_switch import udp4


def run(loss: float = 0.0, rate: float = 0.0, delay: float = 0.0, n: int = 2000) -> tuple[list[float], int]:
    tb = VirtualFabric(star(2))
    sw = tb.switches["s0"]
    sw.degrade_port(1, loss=loss, rate_bps=rate, delay_s=delay)
    for i in range(n):
        tb.send("s0", "s0-eth0", udp4(0, 1, size=1000, sport=i), t=0.0)
    tb.run()
    return [t for t, _ in tb.received[("s0", "s0-eth1")]], sw.ports[1].tx.lost


def test_loss_is_random_per_frame_seeded_and_counted():
    got, lost = run(loss=0.05)
    assert len(got) + lost == 2000 and 60 < lost < 140  # 5 % of 2000, give or take sampling
    assert run(loss=0.05)[1] == lost  # the same seed loses the same frames
    assert run()[1] == 0


def test_rate_caps_the_wire_and_delay_adds_to_the_cable():
    plain, _ = run(n=200)
    slow, _ = run(rate=25e9, n=200)
    gaps = (plain[-1] - plain[0]) / 199, (slow[-1] - slow[0]) / 199
    assert gaps[1] == pytest.approx(4 * gaps[0])  # a quarter of the rate: four times the spacing
    late, _ = run(delay=5e-6, n=1)
    assert late[0] - plain[0] == pytest.approx(5e-6)


@pytest.mark.root
@pytest.mark.mininet
def test_a_degraded_plane_loses_what_it_is_told_and_restore_brings_it_back(no_leftovers):
    """On the fabric clock: a MetaRoCE write over two planes, one of them losing 2 %: the write is exact,
    the losses are counted on that plane's ports and retransmitted; restored, the same write loses
    nothing. Errors are one clear line each."""
    from emu import FabricNet, FPFTopo

    with FabricNet(FPFTopo(gpus=2, planes=2, leaves=1), clock="fabric") as net:
        net.degrade(plane=1, loss=0.02)
        w = net.roce.write("gpu0", "gpu1", nbytes=2 << 20)
        ports = net.stats().raw["switches"]["p1l0"]["ports"]
        lost = sum(p["drops"].get("degraded_loss", 0) + p.get("host_nic", {}).get("degraded_loss", 0)
                   for p in ports.values())
        assert w.data_ok and lost > 0 and w.retransmits > 0  # (some of the lost were ACKs: no resend for those)
        assert all(p["degraded"]["loss"] == 0.02 for p in ports.values())
        assert not any("degraded" in p for p in net.stats().raw["switches"]["p0l0"]["ports"].values())
        net.restore(plane=1)
        again = net.roce.write("gpu0", "gpu1", nbytes=2 << 20)
        assert again.data_ok and again.retransmits == 0
        assert not any("degraded" in p for p in net.stats().raw["switches"]["p1l0"]["ports"].values())
        for bad, words in (({"plane": 1, "loss": 1.5}, "probability"), ({"plane": 1}, "give loss="),
                           ({"plane": 9, "loss": 0.1}, "no plane 9"), ({"switch": "gpu0", "loss": 0.1}, "no fabric switch")):
            with pytest.raises(ValueError, match=words):
                net.degrade(**bad)
