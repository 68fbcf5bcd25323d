"""Checker of lab pfc-headroom: the student's headroom on a real 2 km BAG link under a lossless incast."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from emu import BAGTopo, FabricNet
from emu.control.runtime import PROBE_FRAME, WIRE_OVERHEAD_BYTES
from emu.labs import StepFailed
from emu.net.flows import Flow
from emu.scenarios.common import DSCP_LOSSLESS, ECT0, totals
from emu.units import FIBRE_S_PER_M, pfc_headroom

MODULE = "headroom.py"
CLOCKS = ("fabric", "wall")  # the incast is the project's own flows: exact on the fabric clock; D for the wall's
D = 10_000
LENGTH_M = 2000.0
RATE = 800e9


@contextmanager
def fabric(clock: str) -> Iterator[FabricNet]:
    topo = BAGTopo(regions=2, buildings=1, leaves=1, spines=1, hosts_per_leaf=2, bags=1, rate="400G",
                   fabric_rate="800G", bag_rates="800G", distance=f"{LENGTH_M:g}m")
    with FabricNet(topo, clock=clock, dilation=D) as net:
        yield net


def _incast(net: FabricNet) -> tuple[object, object, int, int]:
    dst = net.get("h100x0").IP()
    flows = [Flow(src, "h100x0", dst, 9400, 2 << 20, 400e9, tos=DSCP_LOSSLESS << 2 | ECT0)
             for src in ("h000x0", "h000x1")]
    before = net.stats()
    sent, got = net.traffic(flows).wait()
    after = net.stats()
    return before, after, sum(s["sent_bytes"] for s in sent), got[("h100x0", 9400, False)]["received_bytes"]


def step_formula(work, net: FabricNet) -> str:
    """Step 1: the formula"""
    # Arithmetic, not a measurement: the README names every term and constant (the round trip, four
    # frames of MTU_ON_WIRE, a PFC frame of 84), the same sum the switches keep (emu.units.pfc_headroom),
    # so the one freedom left is rounding a fraction of a byte. A band wider than that would pass a
    # formula a frame short (an MTU is 0.08 % of 2 km at 800G but 24 % of 2 m at 100G).
    for rate, length in ((100e9, 2.0), (400e9, 100.0), (800e9, 2000.0), (800e9, 20_000.0)):
        truth, said = pfc_headroom(rate, length * FIBRE_S_PER_M), work.headroom_bytes(rate, length)
        if abs(said - truth) > 1:
            raise StepFailed(f"{length:g} m at {rate / 1e9:g} Gb/s needs {truth} bytes; headroom_bytes said "
                             f"{said}: the round trip (2 x length x 5 ns/m, at rate / 8 bytes a second), four "
                             "frames of 1600 bytes and the PFC frame of 84")
    return f"2 km at 800G: {work.headroom_bytes(800e9, 2000.0)} bytes"


def step_too_little(work, net: FabricNet) -> str:
    """Step 2: too little, counted"""
    net.control.set_link_headroom("bag0x0", "bag1x0", work.headroom_bytes(RATE, 100.0))
    before, after, _, _ = _incast(net)
    truth = totals(after.raw)["drops_lossless"] - totals(before.raw)["drops_lossless"]
    said = work.lossless_drops(before, after)
    if said != truth:
        raise StepFailed(f"the switches dropped {truth} class-3 packets; lossless_drops said {said}")
    if truth == 0:
        raise StepFailed("no lossless packet dropped with a 100 m headroom: is headroom_bytes too generous?")
    return f"{truth} lossless packets dropped with the headroom of 100 m"


def step_enough(work, net: FabricNet) -> str:
    """Step 3: enough"""
    nbytes = work.headroom_bytes(RATE, LENGTH_M)
    net.control.set_link_headroom("bag0x0", "bag1x0", nbytes)
    before, after, sent, received = _incast(net)
    drops = totals(after.raw)["drops_lossless"] - totals(before.raw)["drops_lossless"]
    if drops:
        raise StepFailed(f"{drops} lossless packets dropped with {nbytes} bytes of headroom for 2 km")
    if received != sent:
        raise RuntimeError(f"{sent - received} bytes sent did not arrive, with no drop counted: the emulator, "
                           "not your headroom")
    return f"{nbytes} bytes of headroom: 0 dropped, {received} bytes delivered"


def step_measured(work, net: FabricNet) -> str:
    """Step 4: from a measured round trip"""
    m = net.control.measure_cable("bag0x0", "bag1x0")
    said = work.length_from_rtt(m.rtt_s, RATE, PROBE_FRAME + WIRE_OVERHEAD_BYTES)
    if abs(said - m.length_m) > 0.01 * m.length_m + 1:
        raise StepFailed(f"a round trip of {m.rtt_s * 1e6:.3f} us is {m.length_m:.0f} m of fibre; "
                         f"length_from_rtt said {said:.0f} m")
    return f"RTT {m.rtt_s * 1e6:.3f} us: {said:.0f} m (the cable is {LENGTH_M:g} m)"


STEPS = [step_formula, step_too_little, step_enough, step_measured]
