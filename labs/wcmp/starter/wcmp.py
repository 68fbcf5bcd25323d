"""Lab wcmp: fill in each function (see README.md), then run `sudo .venv/bin/emu lab check wcmp`."""

from __future__ import annotations

from emu import FabricStats
from emu.control.runtime import ControlTiming


def predicted_shares(capacities: dict[str, float]) -> dict[str, float]:
    """Step 1: each path's share of the bytes under weighted ECMP, from its capacity (b/s)."""
    raise NotImplementedError("step 1: weights proportional to capacity")


def measured_shares(before: FabricStats, after: FabricStats,
                    ports: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Step 2: each path's share of the bytes its (switch, port) sent between the snapshots."""
    raise NotImplementedError("step 2: tx_bytes after minus before, over the total")


def damped_timing() -> ControlTiming:
    """Step 4: 50 us detection and a hold-down that folds a 3-change flap (150 us apart) into one."""
    raise NotImplementedError("step 4: ControlTiming(detection_s=50e-6, hold_down_s=...)")
