"""The fidelity verdict of a run on a fabric: the engine's workers and whatever else kept time."""

from __future__ import annotations

from typing import Any

from emu.fidelity import (
    EMULATOR_IO,
    Part,
    emulator_drops,
    engine_parts,
    log_for_study,
    packet_time_s,
    verdict,
)


def fabric_fidelity(stats: dict[str, Any], *, rate_bps: float = 100e9, frame_bytes: int = 1500,
                    parts: list[Part] | None = None, senders: list[dict[str, Any]] | None = None,
                    endpoints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`stats` from the fabric (its workers' lateness), plus paced UDP senders' results (`senders`)
    and MetaRoCE endpoints' results (`endpoints`, each with its `fidelity` parts). The packet time is
    one `frame_bytes` frame at `rate_bps`, the fastest link the run's traffic uses."""
    all_parts = engine_parts(stats) + list(parts or [])
    all_parts += [Part.from_summary(f"traffic sender {i}", "traffic", s["lateness"], paced=True)
                  for i, s in enumerate(senders or []) if "lateness" in s]
    all_parts += [Part(**f) for e in endpoints or [] for f in e.get("fidelity", [])]
    # BMv2's simple_switch keeps no schedule it could report against: its runs are never judged ok.
    missing = ["BMv2 simple_switch"] if stats.get("backend") == "bmv2" else []
    fid = verdict(all_parts, dilation=stats["dilation"], packet_s=packet_time_s(rate_bps, frame_bytes),
                  missing=missing, drops=emulator_drops(stats))
    log_for_study(fid)
    return fid


__all__ = ["EMULATOR_IO", "emulator_drops", "fabric_fidelity"]
