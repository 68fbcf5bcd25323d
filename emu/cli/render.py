"""Rich tables for engine counters, in fabric units, with the dilation stated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from emu.units import format_rate, format_size, format_time


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
                str(p.get("ecn_marked", "-")), f"{p.get('pfc_tx', '-')}/{p.get('pfc_rx', '-')}",
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


def _unit(key: str) -> Callable[[float], str] | None:
    """How a figure named `key` reads to a person, from the name's unit (raw numbers stay in --json)."""
    k = key.lower()
    if k.endswith("_gbps"):
        return lambda v: f"{v:.2f} GB/s"
    if "_over_" in k and not k.endswith(("_fraction", "_share", "_pct")):  # a ratio, whatever its terms' unit
        return None
    if "bytes" in k:
        return format_size
    if k.endswith("_bps"):
        return format_rate
    if k.endswith("_ns"):
        return lambda v: format_time(v * 1e-9)
    if k.endswith("_us"):
        return lambda v: format_time(v * 1e-6)
    if k.endswith("_s"):
        return format_time
    if k.endswith("_pct"):
        return lambda v: f"{v:.1f} %"
    if k.endswith("_fraction") or k.endswith("_share") or k.endswith("_of_bound"):
        return lambda v: f"{100 * v:.1f} %"
    return None


def human(value: Any, unit: Callable[[float], str] | None = None, depth: int = 0) -> str:
    """One value as text: numbers in their unit, dicts and short lists inline, long lists counted."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        return unit(value) if unit else (f"{value:.4g}" if isinstance(value, float) else str(value))
    if isinstance(value, dict):
        if depth >= 2:
            return f"{{{len(value)} entries}}"
        return "{" + ", ".join(f"{k}: {human(v, _unit(str(k)) or unit, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        if len(value) > 8 or depth >= 2:
            return f"[{len(value)} entries]"
        return "[" + ", ".join(human(v, unit, depth + 1) for v in value) + "]"
    return str(value)


SERIES_WORDS = ("series", "trace", "samples")  # a figure over time: for a plot or --json, not a terminal


def _is_series(key: str, value: Any) -> bool:
    """Whether a figure is a series, a trace or a long list: what a person cannot read in a terminal."""
    if any(w in key.lower() for w in SERIES_WORDS):
        return True
    if isinstance(value, (list, tuple)):
        return len(value) > 8 or any(isinstance(v, (list, tuple, dict)) for v in value)
    if isinstance(value, dict):
        return len(value) > 8 or any(_is_series(str(k), v) for k, v in value.items())
    return False


NOT_THERE = object()


def figure_at(result: Any, path: str) -> Any:
    """The figure at `path` ("a.b.0": keys and list indices) in a result, or NOT_THERE."""
    here = result
    for part in path.split("."):
        if isinstance(here, dict) and part in here:
            here = here[part]
        elif isinstance(here, (list, tuple)) and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            return NOT_THERE
    return here


def print_result(result: dict[str, Any], console: Console | None = None, *, headline: tuple[str, ...] = ()) -> None:
    """A scenario's or bench's result for a person: its verdict, then a table of its figures, each in its
    unit. With a `headline` (the figures the verdict is made of: Scenario.headline), only those, and the
    names of the others; without one, every figure but series, traces and long lists. What is not shown
    is in --json, as is every raw number. The fidelity verdict is left to its one line on stderr."""
    c = console or Console()
    name = result.get("scenario") or result.get("bench") or ""
    if "passed" in result:
        verdict = "[bold green]PASSED[/bold green]" if result["passed"] else "[bold red]FAILED[/bold red]"
        missing = "; missing: " + "; ".join(result["missing"]) if result.get("missing") else ""
        c.print(f"{escape(str(name))}: {verdict}{escape(missing)}", highlight=False)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("what the verdict is made of" if headline else "figure")
    table.add_column("value", overflow="fold")
    left: list[str] = []
    shown = set()
    for path in headline:
        v = figure_at(result, path)
        if v is NOT_THERE:
            continue
        shown.add(path)  # a whole top-level figure; one shown in part is still named below
        table.add_row(escape(path), escape(human(v, _unit(path.rsplit(".", 1)[-1]))))
    for k, v in result.items():
        if k in ("fidelity", "passed", "missing", "scenario", "bench") or (headline and k in shown):
            continue
        if headline or _is_series(str(k), v):
            left.append(str(k))
            continue
        table.add_row(escape(str(k)), escape(human(v, _unit(k))))
    c.print(table)
    if left:
        what = "the other figures" if headline else "series, traces, long lists"
        c.print(f"in --json only ({what}): {escape(', '.join(left))}", highlight=False)
