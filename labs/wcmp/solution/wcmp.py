"""Lab wcmp: a solution."""

from __future__ import annotations

from emu import FabricStats
from emu.control.runtime import ControlTiming


def predicted_shares(capacities: dict[str, float]) -> dict[str, float]:
    total = sum(capacities.values())
    return {path: c / total for path, c in capacities.items()}


def measured_shares(before: FabricStats, after: FabricStats,
                    ports: dict[str, tuple[str, str]]) -> dict[str, float]:
    sent = {path: after.port(sw, p).tx_bytes - before.port(sw, p).tx_bytes for path, (sw, p) in ports.items()}
    total = sum(sent.values()) or 1
    return {path: n / total for path, n in sent.items()}


def damped_timing() -> ControlTiming:
    return ControlTiming(detection_s=50e-6, hold_down_s=1e-3)  # longer than the flap's 3 x 150 us
