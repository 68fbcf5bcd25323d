"""Checker of lab wcmp: predictions against a real unequal BAG's counters; a flap with and without damping."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from emu import BAGTopo, FabricNet, FabricStats
from emu.control.runtime import ControlTiming
from emu.labs import StepFailed
from emu.net.flows import Flow

MODULE = "wcmp.py"
# The measured flows are the project's own: exact on the fabric clock. The flaps come between them, the
# controller's timers on fabric time that follows the wall at 1/D (on either clock).
CLOCKS = ("fabric", "wall")
D = 2000
DETECTION = ControlTiming(detection_s=50e-6)
FAILED = "bag0x0-bag1x0"


@contextmanager
def fabric(clock: str) -> Iterator[FabricNet]:
    # 800G spine links: what feeds a BAG switch never limits it, so each path's share is its long-haul
    # capacity's share (the scenario's 400G ones do limit: question 2).
    topo = BAGTopo(regions=2, buildings=1, leaves=1, spines=1, hosts_per_leaf=1, bags=2, rate="400G",
                   fabric_rate="800G", bag_rates="400G,100G", distance="10km")
    with FabricNet(topo, clock=clock, dilation=D, control=DETECTION) as net:
        yield net


def _paths(net: FabricNet) -> dict[str, tuple[str, str, float]]:
    """'bag0xA-bag1xB' -> (region-0 switch, its port, capacity b/s)."""
    out = {}
    for link in net.links:
        ends = sorted((link.intf1, link.intf2), key=lambda i: i.node.name)
        if ends[0].node.name.startswith("bag0") and ends[1].node.name.startswith("bag1"):
            out[f"{ends[0].node.name}-{ends[1].node.name}"] = (ends[0].node.name, ends[0].name, link.fabric.rate_bps)
    return dict(sorted(out.items()))


def _measure(net: FabricNet) -> tuple[FabricStats, FabricStats]:
    flow = Flow("h000x0", "h100x0", net.get("h100x0").IP(), 9500, 2 << 20, 300e9, flows=512)
    before = net.stats()
    net.traffic([flow]).wait()
    return before, net.stats()


def _truth(before: FabricStats, after: FabricStats, paths: dict[str, tuple[str, str, float]]) -> dict[str, float]:
    sent = {k: after.port(sw, p).tx_bytes - before.port(sw, p).tx_bytes for k, (sw, p, _) in paths.items()}
    return {k: n / sum(sent.values()) for k, n in sent.items()}


def _fmt(shares: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in shares.items())


def step_predict(work, net: FabricNet) -> str:
    """Step 1: predict"""
    caps = {k: c for k, (_, _, c) in _paths(net).items()}
    said = work.predicted_shares(caps)
    want = {k: c / sum(caps.values()) for k, c in caps.items()}
    if set(said) != set(want) or any(abs(said[k] - want[k]) > 1e-6 for k in want):
        raise StepFailed(f"for capacities {caps}, weighted ECMP gives {_fmt(want)}; you said {said}")
    return _fmt(said)


def step_measure(work, net: FabricNet) -> str:
    """Step 2: measure"""
    paths = _paths(net)
    before, after = _measure(net)
    truth = _truth(before, after, paths)
    said = work.measured_shares(before, after, {k: (sw, p) for k, (sw, p, _) in paths.items()})
    if set(said) != set(truth) or any(abs(said[k] - truth[k]) > 1e-6 for k in truth):
        raise StepFailed(f"the counters give {_fmt(truth)}; measured_shares said {said}")
    predicted = work.predicted_shares({k: c for k, (_, _, c) in paths.items()})
    error = max(abs(predicted[k] - truth[k]) for k in truth)
    if error > 0.1:
        raise StepFailed(f"measured {_fmt(truth)} against your prediction {_fmt(predicted)}: off by {error:.2f}")
    return f"measured {_fmt(truth)}"


def step_failure(work, net: FabricNet) -> str:
    """Step 3: a link fails"""
    paths = _paths(net)
    net.fail(link=tuple(FAILED.split("-")))
    try:
        net.control.settle()
        before, after = _measure(net)
    finally:
        net.restore(link=tuple(FAILED.split("-")))
        net.control.settle()
    truth = _truth(before, after, paths)
    predicted = work.predicted_shares({k: (0.0 if k == FAILED else c) for k, (_, _, c) in paths.items()})
    error = max(abs(predicted[k] - truth[k]) for k in truth)
    if error > 0.1:
        raise StepFailed(f"after the failure: measured {_fmt(truth)}, you predicted {_fmt(predicted)}")
    return f"after the failure: measured {_fmt(truth)}"


def _flap(net: FabricNet, timing: ControlTiming) -> int:
    control = net.control
    control.timing = timing
    start = control.updates
    for up in (False, True, False):
        (net.restore if up else net.fail)(link=("bag0x0", "bag1x0"))
        net.timebase.sleep(150e-6)
    control.settle()
    updates = control.updates - start
    control.timing = ControlTiming(detection_s=0.0)
    net.restore(link=("bag0x0", "bag1x0"))
    control.settle()
    return updates


def step_damping(work, net: FabricNet) -> str:
    """Step 4: damping"""
    timing = work.damped_timing()
    if abs(timing.detection_s - 50e-6) > 1e-9:
        raise StepFailed(f"keep the detection at 50 us (you gave {timing.detection_s * 1e6:g} us)")
    if timing.hold_down_s > 10e-3:
        raise StepFailed("a hold-down over 10 ms keeps a real failure unrouted for that long: keep it shorter")
    plain, damped = _flap(net, DETECTION), _flap(net, timing)
    if damped >= plain:
        raise StepFailed(f"the flap cost {plain} route updates without damping and {damped} with your hold-down "
                         f"of {timing.hold_down_s * 1e6:g} us: it must fold the three changes together")
    return f"route updates for the flap: {plain} without damping, {damped} with"


STEPS = [step_predict, step_measure, step_failure, step_damping]
