"""Lab srv6-te: a solution."""

from __future__ import annotations

from emu import FabricStats

BACKBONE = ("r0", "r1", "r2", "r3", "r4")


def end_sid(k: int) -> str:
    return f"fc00:{k:x}::e"


def dt6_sid(k: int) -> str:
    return f"fc00:{k:x}::d6"


def long_way() -> list[str]:
    return [end_sid(4), end_sid(3), dt6_sid(6)]  # pe1 is router 5 + 1 = 6


def routers_crossed(before: FabricStats, after: FabricStats, packets: int) -> list[str]:
    def sent(stats: FabricStats, r: str) -> int:
        return sum(p.tx_packets for p in stats.switch(r).ports.values())

    return sorted(r for r in BACKBONE if sent(after, r) - sent(before, r) >= packets)
