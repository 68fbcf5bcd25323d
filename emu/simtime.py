"""Fabric time as whole picoseconds: the unit, its two conversions, and the one rounding of a rate.

Why integers. A schedule keyed by float seconds orders its events by sums whose last bits depend on the
order they were added in (1e-6 + 2e-6 is not 3e-6), so two events meant to coincide may or may not tie,
and a figure can move with anything that changes the order of additions (a split of the fabric, a pacing,
a compiler's choice). Whole picoseconds (what htsim keeps as simtime_picosec) add exactly, compare exactly,
and are exact in an int64 for 106 days of fabric time: 1 ps is 1/80 of a byte's time at 100 Gb/s and
1/8 of one at 1 Tb/s, so no link of the emulator is finer than the unit.

Where the rounding happens. Time is rounded once, where it is made: a delay read in the user's units (or
a propagation delay from a distance) becomes whole picoseconds when it is parsed (`to_ps`); a frame's time
on a wire is `ser_ps` of its bytes and the wire's rate; from then on every instant is a sum of integers.
Seconds come back only at the edges, for people and for the wall (results, reports, plots, the CLI; the
pacer and the stamp, where the wall's seconds and D meet): `to_s`.

The rules, the same in the Python reference and the compiled core (emu.dataplane._core's c_to_ps, c_to_s,
c_ser_ps, c_rate_of; tests/test_simtime.py holds them to the same answers):

- `to_ps(s)`: s x 10^12 in double precision, rounded to the nearest integer, halves to even (Python's
  round(), C's rint() in the default rounding mode); outside int64, or not finite, an OverflowError.
- `to_s(ps)`: ps / 10^12 in double precision (a division, not a product by 1e-12: the correctly rounded
  quotient, the same on both cores).
- `ser_ps(nbytes, rate_bps)`: the time of nbytes at a rate in whole bit/s, nbytes x 8 x 10^12 / rate to
  the nearest picosecond, halves up, in integer arithmetic (exact: no float in between). A rate that is
  not whole bit/s (a rate congestion control cut) is first rounded to whole bit/s (`rate_of`; the compiled
  core's c_rate_of, held to it by the same test). A plane offered 1/w of its wire's time (MetaRoCE's
  weighted spraying) takes ser_ps divided by w, rounded to the nearest picosecond (round() / rint()). Any byte count whose time fits an int64 (a PFC pause of 65 535 quanta is 33.5 Mbit; the
  compiled core widens to 128 bits past 1.15 MB); beyond, or a negative count or rate, an OverflowError
  on both cores.

`NEVER` stands for "no event is due" where a time must stay an integer (the largest int64).
"""

from __future__ import annotations

import math
import operator

PS_PER_S = 10**12
PS_PER_US = 10**6
PS_PER_NS = 10**3
NEVER = (1 << 63) - 1  # the largest int64: later than any instant

_INT64_LIMIT = 9223372036854775808.0  # 2**63 as a double


def to_ps(seconds: float) -> int:
    """Whole picoseconds of `seconds` (nearest, halves to even)."""
    x = seconds * 1e12
    if not -_INT64_LIMIT <= x < _INT64_LIMIT:  # also NaN
        raise OverflowError(f"{seconds!r} s is not a time in int64 picoseconds")
    return round(x)


def to_s(ps: int) -> float:
    """Seconds of `ps` picoseconds, for an edge (a result, a plot, the wall)."""
    return ps / 1e12


def rate_of(rate_bps: float) -> int:
    """A rate in whole bit/s (nearest, halves to even), positive: what `ser_ps` divides by."""
    if not math.isfinite(rate_bps) or rate_bps < 0.5:
        raise ValueError(f"a rate must be a positive number of bit/s, got {rate_bps!r}")
    return round(rate_bps)


def ser_ps(nbytes: int, rate_bps: int) -> int:
    """Picoseconds to send `nbytes` at `rate_bps` (whole bit/s): nearest, halves up, exact."""
    if type(nbytes) is not int or type(rate_bps) is not int:  # integers, as the compiled core's (the hot path's
        nbytes, rate_bps = operator.index(nbytes), operator.index(rate_bps)  # test is the cheaper one)
    ps = (nbytes * 8 * PS_PER_S + rate_bps // 2) // rate_bps if nbytes >= 0 and rate_bps > 0 else -1
    if not 0 <= ps <= NEVER:
        raise OverflowError(f"{nbytes} bytes at {rate_bps} bit/s is outside int64 picosecond arithmetic")
    return ps
