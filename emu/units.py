"""Fabric units and time dilation: the one place quantities are parsed and printed.

Users speak in fabric units (400G, 2us, 50km, 4KiB). The engine runs D times
slower than the fabric it emulates, so that a Python data plane can keep the
schedule: wall duration = fabric duration x D, wall rate = fabric rate / D.
Sizes in bytes are the same in both worlds, so bandwidth-delay products and
buffer occupancies are those of the real fabric.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "UnitError",
    "Dilation",
    "parse_rate",
    "parse_time",
    "parse_size",
    "parse_distance",
    "format_rate",
    "format_time",
    "format_size",
    "FIBRE_S_PER_M",
    "WIRE_OVERHEAD_BYTES",
]

# Light in fibre: about 5 ns per metre (513 ns per 100 m in vendor tables).
FIBRE_S_PER_M = 5e-9
# Per frame on the wire beyond what a veth carries: FCS 4 + preamble 8 + IFG 12.
WIRE_OVERHEAD_BYTES = 24


class UnitError(ValueError):
    """A quantity could not be understood; the message says what was expected."""


_NUM = r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"

_RATE = {
    "": 1.0, "bps": 1.0, "b/s": 1.0,
    "k": 1e3, "kbps": 1e3, "kb/s": 1e3, "kbit": 1e3,
    "m": 1e6, "mbps": 1e6, "mb/s": 1e6, "mbit": 1e6,
    "g": 1e9, "gbps": 1e9, "gb/s": 1e9, "gbit": 1e9,
    "t": 1e12, "tbps": 1e12, "tb/s": 1e12, "tbit": 1e12,
}
_TIME = {
    "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12,
}
_SIZE = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
    "k": 1024, "m": 1024**2, "g": 1024**3,
}
_DIST = {"m": 1.0, "km": 1000.0, "cm": 0.01}


def _parse(text: str | float | int, table: dict[str, float], what: str, example: str) -> float:
    if isinstance(text, bool):
        raise UnitError(f"{what}: expected a quantity like {example!r}, got {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(_NUM + r"([a-zA-Zµ/]*)\s*", str(text))
        if not m:
            raise UnitError(f"{what}: cannot read {text!r}; expected a quantity like {example!r}")
        unit = m.group(2).lower()
        if unit not in table:
            units = ", ".join(sorted(k for k in table if k))
            raise UnitError(f"{what}: unknown unit {m.group(2)!r} in {text!r}; use one of {units}")
        value = float(m.group(1)) * table[unit]
    if value < 0:
        raise UnitError(f"{what}: {text!r} is negative")
    if not math.isfinite(value):  # 1e400G reads as infinity
        raise UnitError(f"{what}: {text!r} is not a finite quantity")
    return value


def parse_rate(text: str | float) -> float:
    """Bits per second from '100G', '400Gbps', '10M' or a number of b/s."""
    return _parse(text, _RATE, "rate", "100G")


def parse_time(text: str | float) -> float:
    """Seconds from '2us', '1.5ms', '300ns' or a number of seconds."""
    return _parse(text, _TIME, "time", "2us")


def parse_size(text: str | float) -> int:
    """Bytes from '4KiB', '9000', '1MB' (K/M/G alone are binary, as switch buffers are)."""
    return int(round(_parse(text, _SIZE, "size", "4KiB")))


def parse_distance(text: str | float) -> float:
    """Metres from '50km', '100m' or a number of metres."""
    return _parse(text, _DIST, "distance", "50km")


def _fmt(value: float, steps: list[tuple[float, str]], digits: int = 3) -> str:
    for scale, unit in steps:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{unit}"
    scale, unit = steps[-1]
    return f"{value / scale:.{digits}g}{unit}"


def format_rate(bps: float) -> str:
    return _fmt(bps, [(1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s"), (1.0, "b/s")])


def format_time(seconds: float) -> str:
    return _fmt(seconds, [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")])


def format_size(nbytes: float) -> str:
    return _fmt(nbytes, [(1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"), (1, "B")])


@dataclass(frozen=True)
class Dilation:
    """Maps fabric time to wall time: wall = fabric x factor."""

    factor: float = 1000.0

    def __post_init__(self) -> None:
        if not (self.factor >= 1.0) or self.factor != self.factor:
            raise UnitError(f"dilation must be a number >= 1, got {self.factor!r}")

    def wall_time(self, fabric_seconds: float) -> float:
        return fabric_seconds * self.factor

    def fabric_time(self, wall_seconds: float) -> float:
        return wall_seconds / self.factor

    def wall_rate(self, fabric_bps: float) -> float:
        return fabric_bps / self.factor

    def fabric_rate(self, wall_bps: float) -> float:
        return wall_bps * self.factor


def propagation_delay(distance_m: float) -> float:
    """One-way fibre delay in fabric seconds."""
    return distance_m * FIBRE_S_PER_M


MTU_ON_WIRE = 1600  # bytes: the largest frame with its preamble and gap, rounded up


def pfc_headroom(rate_bps: float, one_way_delay_s: float) -> int:
    """PFC headroom in bytes, for a cable of `one_way_delay_s` (seconds) at `rate_bps` (bits per second):
    what can still arrive after XOFF leaves: the cable's round trip at line rate, two frames at each end
    (the peer's: the one it had started and one more while it acts on the XOFF; this side's: the one it
    had started, which delays the XOFF, and the one arriving while it decides), and the PFC frame itself.
    Here, not in the buffer, because the control plane sizes headroom from measured cables too."""
    return int(2 * rate_bps * one_way_delay_s / 8 + 2 * MTU_ON_WIRE + 2 * MTU_ON_WIRE + 84)
