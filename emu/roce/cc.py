"""Congestion control for a queue pair: DCQCN, or none (PFC alone, as Meta ran 400G).

Rates are in fabric bits per second and timers in fabric seconds; the
transport converts with the dilation. DCQCN after Zhu et al. (SIGCOMM 2015):
on a CNP, remember the rate as target and cut by alpha/2, raise alpha; with
no CNP for an alpha period, decay alpha; every rate-increase period, five
steps of fast recovery halfway back to the target, then additive increase,
then hyper increase. Flows start at line rate.
"""

from __future__ import annotations

from dataclasses import dataclass


class CongestionControl:
    """The interface: a rate the QP may send at, told about CNPs and time passing."""

    name = "none"

    def __init__(self, line_rate: float) -> None:
        self.line_rate = line_rate
        self.rate = line_rate
        self.cnps = 0

    def on_cnp(self, now: float) -> None:
        self.cnps += 1

    def tick(self, now: float) -> None:
        pass


@dataclass(frozen=True)
class DcqcnParams:
    g: float = 1 / 256
    alpha_period_s: float = 55e-6
    increase_period_s: float = 55e-6
    fast_recovery_steps: int = 5
    ai_fraction: float = 0.002  # additive step, as a fraction of line rate (40 Mb/s at 20G... scaled)
    hai_fraction: float = 0.02
    min_rate_fraction: float = 0.001


class Dcqcn(CongestionControl):
    name = "dcqcn"

    def __init__(self, line_rate: float, params: DcqcnParams | None = None) -> None:
        super().__init__(line_rate)
        self.p = params or DcqcnParams()
        self.alpha = 1.0
        self.target = line_rate
        self.last_cnp = -1.0
        self.last_alpha = 0.0
        self.last_increase = 0.0
        self.stage = 0

    def on_cnp(self, now: float) -> None:
        self.cnps += 1
        self.target = self.rate
        self.rate = max(self.line_rate * self.p.min_rate_fraction, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.last_cnp = now
        self.last_alpha = now
        self.last_increase = now
        self.stage = 0

    def tick(self, now: float) -> None:
        p = self.p
        while now - self.last_alpha >= p.alpha_period_s:
            self.last_alpha += p.alpha_period_s
            if self.last_alpha - self.last_cnp >= p.alpha_period_s:
                self.alpha *= 1 - p.g
        while now - self.last_increase >= p.increase_period_s:
            self.last_increase += p.increase_period_s
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
