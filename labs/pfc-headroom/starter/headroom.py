"""Lab pfc-headroom: fill in each function (see README.md), then `sudo .venv/bin/emu lab check pfc-headroom`."""

from __future__ import annotations

from emu import FabricStats

FIBRE_S_PER_M = 5e-9
MTU_ON_WIRE = 1600
PFC_FRAME = 84


def headroom_bytes(rate_bps: float, length_m: float) -> int:
    """Step 1: the PFC headroom (bytes) of a port on a link of `length_m` metres at `rate_bps`."""
    raise NotImplementedError("step 1: the cable's round trip at line rate, plus the frames in flight")


def lossless_drops(before: FabricStats, after: FabricStats) -> int:
    """Step 2: class-3 packets dropped by every port of every switch between the snapshots."""
    raise NotImplementedError("step 2: sum port.drops_by_class[3], after minus before")


def length_from_rtt(rtt_s: float, rate_bps: float, probe_bytes: int) -> float:
    """Step 4: the cable length (m) from a probe's round trip (fabric s)."""
    raise NotImplementedError("step 4: half the round trip less the probe's serialisation, over 5 ns/m")
