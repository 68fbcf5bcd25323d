"""Rich tables for engine counters, in fabric units, with the dilation stated."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from emu.units import format_size, format_time


def stats_table(stats: dict[str, Any], *, only_active: bool = True) -> Table:
    d = stats["dilation"]
    t = Table(title=f"Fabric counters (dilation D={d:g}; times in fabric units)")
    for col in ("switch", "port", "rx pkts", "tx pkts", "tx bytes", "drops", "ECN", "PFC tx/rx", "paused", "queue hwm"):
        t.add_column(col, justify="left" if col in ("switch", "port", "drops") else "right")
    for sw, s in sorted(stats["switches"].items()):
        for port, p in s["ports"].items():
            if only_active and not (p["rx_packets"] or p["tx_packets"]):
                continue
            # BMv2 counts fewer things than the engine: what a backend does not count shows as "-".
            drops = ", ".join(f"{k}={v}" for k, v in sorted(p.get("drops", {}).items())) or "-"
            t.add_row(
                sw, port, str(p["rx_packets"]), str(p["tx_packets"]), format_size(p["tx_bytes"]), drops,
                str(p["ecn_marked"]), f"{p.get('pfc_tx', '-')}/{p['pfc_rx']}",
                format_time(sum(p["paused_s"])) if "paused_s" in p else "-",
                format_size(max(p["queue_hwm"])) if "queue_hwm" in p else "-",
            )
    return t


def fidelity_lines(stats: dict[str, Any]) -> list[str]:
    out = []
    for w in stats["workers"]:
        f = w["fidelity"]
        out.append(
            f"worker {w['worker']}: {f['events']} events, lateness p50 {format_time(f['p50_s'])} "
            f"p99 {format_time(f['p99_s'])} max {format_time(f['max_s'])} (wall)"
        )
    return out


def print_stats(stats: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(stats_table(stats))
    for line in fidelity_lines(stats):
        console.print(line)
