"""Checker of lab ecn-dcqcn: two real MetaRoCE flows with DCQCN into one port, with the student's RED."""

from __future__ import annotations

from emu import FabricNet, FPFTopo
from emu.labs import StepFailed
from emu.net.switch import RunSettings
from emu.roce.run import EnginePerf
from emu.roce.transport import HEADERS
from emu.scenarios.dcqcn import overlap_rates
from emu.units import WIRE_OVERHEAD_BYTES

MODULE = "dcqcn.py"
CLOCKS = ("fabric",)
CLOCK_NOTE = "on the wall clock its two DCQCN flows needed D = 15 000 and more, and a slower machine fell behind"
# Per flow: ~2.7 ms of fabric, tens of cut-and-recover rounds. On the fabric clock the run is exact and
# the same every time for the same thresholds (on the wall clock it needed D = 15 000 and more, and a
# slower machine still fell behind).
NBYTES = 16 << 20
# How evenly the two flows must share. The lab's solution measures 0.85 on the fabric clock; on the wall
# clock on-time runs gave 0.81-0.99 (where the marks fall moves it).
FAIRNESS = 0.75
MTU = 1024  # the data frames' payload (step 3 sends with it)
FRAME = MTU + HEADERS - WIRE_OVERHEAD_BYTES  # a full data frame as the queue counts it (no preamble or gap)
PORT_BUFFER = RunSettings.buffer_per_port  # what step 3's port holds (the fabric's default, 1 MiB)
QUEUE_LIMIT = 400_000  # the median queue (2 us samples): the solution 273 KB, no marking 629 KB (window-bound)


def step_curve(work, net: None) -> str:
    """Step 1: the marking curve"""
    for q, want in ((0, 0.0), (99_999, 0.0), (100_000, 0.0), (250_000, 0.1), (399_999, 0.2), (400_000, 1.0),
                    (1e6, 1.0)):
        said = work.mark_probability(q, 100_000, 400_000, 0.2)
        if abs(said - want) > 1e-3:
            raise StepFailed(f"Kmin 100 KB, Kmax 400 KB, Pmax 0.2: at {q:g} bytes the chance is {want}, "
                             f"you said {said}")
    return "RED curve right at 7 points"


def step_thresholds(work, net: None) -> str:
    """Step 2: your thresholds"""
    kmin, kmax, pmax = work.ecn_parameters()
    if not 0 < kmin < kmax or not 0 < pmax <= 1:
        raise StepFailed(f"need 0 < Kmin < Kmax and 0 < Pmax <= 1, got {kmin}, {kmax}, {pmax}")
    # What the queue is made of: whole data frames. A queue under one frame is two frames that arrived at
    # once, not congestion (thresholds in KB, not bytes, land there); a line narrower than a frame holds
    # at most one depth of whole frames: a step, not RED's slope.
    if kmin < FRAME:
        raise StepFailed(f"Kmin {kmin:g} bytes is less than one data frame ({FRAME} bytes): a packet with one "
                         "frame ahead of it, two arriving at once, could be marked (thresholds are in bytes)")
    if kmax - kmin < FRAME:
        raise StepFailed(f"Kmax - Kmin is {kmax - kmin:g} bytes, less than one data frame ({FRAME} bytes): at "
                         "most one queue depth of whole frames falls between them, so the marking line is a step")
    if kmax > PORT_BUFFER:
        raise StepFailed(f"Kmax {kmax / 1e3:g} KB is beyond the port's buffer ({PORT_BUFFER / 1e3:g} KB): no queue "
                         "can reach it, so the marking line never gets to Pmax; keep Kmax within the buffer")
    return f"Kmin {kmin / 1e3:g} KB, Kmax {kmax / 1e3:g} KB, Pmax {pmax:g}"


def step_fair(work, net: None) -> str:
    """Step 3: fair, and short"""
    kmin, kmax, pmax = work.ecn_parameters()
    ecn = (int(kmin), int(kmax), float(pmax))

    with FabricNet(FPFTopo(gpus=3, planes=1, leaves=1), clock="fabric", ecn=ecn) as net:
        net.engine.sample_queues([("p0l0", "p0l0-eth3")], 2e-6)  # every 2 us of fabric time
        run = EnginePerf(net.engine, [net.host_planes("gpu0"), net.host_planes("gpu1")], net.host_planes("gpu2"),
                         nbytes=NBYTES, cc="dcqcn", lat_iters=0, mtu=MTU)
        _, server = run.wait()
        queue = sorted(q for _, q in net.engine.queue_samples()["p0l0/p0l0-eth3"] if q)
    if not server["data_ok"]:
        raise StepFailed("not every byte arrived intact")
    a, b = overlap_rates(server["rx_traces"])
    fairness = min(a, b) / max(a, b)
    median = queue[len(queue) // 2] if queue else 0
    got = f"rates {a / 1e9:.1f} and {b / 1e9:.1f} Gb/s (fairness {fairness:.2f}), median queue {median / 1e3:.0f} KB"
    if fairness < FAIRNESS:
        raise StepFailed(f"{got}: the flows did not share; a gentler slope (smaller Pmax) lets the faster one "
                         "collect more marks")
    if median >= QUEUE_LIMIT:
        raise StepFailed(f"{got}: the queue stood at {QUEUE_LIMIT / 1e3:g} KB or more for half the transfer; "
                         "mark earlier (a smaller Kmin)")
    return got


STEPS = [step_curve, step_thresholds, step_fair]
