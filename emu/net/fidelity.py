"""The fidelity verdict of a run on a fabric: the engine's workers and whatever else kept time."""

from __future__ import annotations

from typing import Any

from emu.fidelity import Part, engine_parts, packet_time_s, verdict

# Drops in the emulator's own I/O, in no switch of the fabric: an engine port's receive ring full (its
# worker lagged), a send the kernel refused, a frame too big for a ring slot, and on BMv2 what the port's
# MAC handed simple_switch that its ingress never saw, or its egress sent that the MAC never read.
EMULATOR_IO = ("rx_socket_overflow", "tx_error", "rx_truncated", "p4_input", "p4_output")


def emulator_drops(stats: dict[str, Any]) -> dict[str, int]:
    """Packets the emulator itself lost, by reason, from a fabric's stats (only reasons that happened)."""
    out: dict[str, int] = {}
    for sw in stats["switches"].values():
        for port in sw["ports"].values():
            for reason, n in port.get("drops", {}).items():
                if reason in EMULATOR_IO and n:
                    out[reason] = out.get(reason, 0) + n
    return out


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
    return verdict(all_parts, dilation=stats["dilation"], packet_s=packet_time_s(rate_bps, frame_bytes),
                   missing=missing) | {"emulator_drops": emulator_drops(stats)}
