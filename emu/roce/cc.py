"""Congestion control for a queue pair: DCQCN, or none (PFC alone, as Meta ran 400G).

Rates are in fabric bits per second (floats: a cut multiplies them), and
times and periods in whole picoseconds of fabric time, as the transport's. DCQCN after Zhu et al. (SIGCOMM 2015):
on a CNP, remember the rate as target and cut by alpha/2, raise alpha; with
no CNP for an alpha period, decay alpha; every rate-increase period, five
steps of fast recovery halfway back to the target, then additive increase,
then hyper increase. Flows start at line rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.simtime import to_ps


class CongestionControl:
    """The interface: a rate the QP may send at, told about CNPs and time passing."""

    name = "none"
    cnp_interval = to_ps(50e-6)  # the receiver (notification point) sends a QP at most one CNP per interval

    def __init__(self, line_rate: float) -> None:
        self.line_rate = line_rate
        self.rate = line_rate
        self.cnps = 0

    def on_cnp(self, now: int) -> None:
        self.cnps += 1

    def tick(self, now: int) -> None:
        pass


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's settings; the periods in seconds, as people state them (rounded to picoseconds once, by Dcqcn)."""

    g: float = 1 / 256
    alpha_period_s: float = 55e-6
    increase_period_s: float = 10e-6
    cnp_interval_s: float = 25e-6
    fast_recovery_steps: int = 5
    # Steps as fractions of line rate, so that the same settings serve 100G and 800G ports; larger
    # than the paper's 40 Mb/s at 40G because emulated transfers last milliseconds, not seconds.
    ai_fraction: float = 0.01
    hai_fraction: float = 0.02
    min_rate_fraction: float = 0.01


class Dcqcn(CongestionControl):
    name = "dcqcn"

    def __init__(self, line_rate: float, params: DcqcnParams | None = None) -> None:
        super().__init__(line_rate)
        self.p = p = params or DcqcnParams()
        self.cnp_interval = to_ps(p.cnp_interval_s)
        self.alpha_period = to_ps(p.alpha_period_s)
        self.increase_period = to_ps(p.increase_period_s)
        self.alpha = 1.0
        self.target = line_rate
        self.last_cnp = -1  # -1: none yet
        self.last_alpha = -1  # set at the first tick: timers run from when the flow starts
        self.last_increase = -1
        self.stage = 0

    def on_cnp(self, now: int) -> None:
        self.cnps += 1
        self.target = self.rate
        self.rate = max(self.line_rate * self.p.min_rate_fraction, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.last_cnp = now
        self.last_alpha = now
        self.last_increase = now
        self.stage = 0

    def tick(self, now: int) -> None:
        p = self.p
        if self.last_alpha < 0:
            self.last_alpha = self.last_increase = now
            return
        while now - self.last_alpha >= self.alpha_period:
            self.last_alpha += self.alpha_period
            if self.last_cnp < 0 or self.last_alpha - self.last_cnp >= self.alpha_period:
                self.alpha *= 1 - p.g
        while now - self.last_increase >= self.increase_period:
            self.last_increase += self.increase_period
            self.stage += 1
            if self.stage > p.fast_recovery_steps:
                step = p.hai_fraction if self.stage > 2 * p.fast_recovery_steps else p.ai_fraction
                self.target = min(self.line_rate, self.target + step * self.line_rate)
            self.rate = min(self.line_rate, (self.rate + self.target) / 2)


def make(name: str, line_rate: float) -> CongestionControl:
    if name == "dcqcn":
        return Dcqcn(line_rate)
    if name == "none":
        return CongestionControl(line_rate)
    raise ValueError(f"unknown congestion control {name!r}; known: dcqcn, none")
