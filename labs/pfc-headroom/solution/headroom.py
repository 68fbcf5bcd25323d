"""Lab pfc-headroom: a solution."""

from __future__ import annotations

from emu import FabricStats

FIBRE_S_PER_M = 5e-9
MTU_ON_WIRE = 1600
PFC_FRAME = 84


def headroom_bytes(rate_bps: float, length_m: float) -> int:
    round_trip = 2 * length_m * FIBRE_S_PER_M * rate_bps / 8
    return int(round_trip + 2 * MTU_ON_WIRE + 2 * MTU_ON_WIRE + PFC_FRAME)


def lossless_drops(before: FabricStats, after: FabricStats) -> int:
    def count(s: FabricStats) -> int:
        return sum(p.drops_by_class[3] for sw in s.switches.values() for p in sw.ports.values())

    return count(after) - count(before)


def length_from_rtt(rtt_s: float, rate_bps: float, probe_bytes: int) -> float:
    return max(0.0, rtt_s / 2 - probe_bytes * 8 / rate_bps) / FIBRE_S_PER_M
