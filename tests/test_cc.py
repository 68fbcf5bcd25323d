"""DCQCN's reaction point, step by step in fabric time (no network)."""

from __future__ import annotations

import pytest

from emu.roce.cc import Dcqcn, DcqcnParams, make
from emu.simtime import PS_PER_US, to_ps

LINE = 100e9


def test_cnp_cuts_by_half_alpha_and_remembers_the_target():
    cc = Dcqcn(LINE)
    cc.tick(0)
    cc.on_cnp(PS_PER_US)
    assert cc.target == LINE and cc.rate == pytest.approx(LINE / 2)  # alpha starts at 1
    assert cc.alpha == pytest.approx(1.0)  # (1 - g) * 1 + g
    cc.on_cnp(2 * PS_PER_US)
    assert cc.target == pytest.approx(LINE / 2) and cc.rate == pytest.approx(LINE / 4)


def test_fast_recovery_then_additive_increase():
    p = DcqcnParams()
    cc = Dcqcn(LINE, p)
    cc.tick(0)
    cc.on_cnp(0)
    cc.on_cnp(0)  # a second CNP: the target is now half the line rate, with room to grow
    target, cut = cc.target, cc.rate
    assert target == pytest.approx(0.5 * LINE) and cut < target
    rates, targets = [], []
    for k in range(1, p.fast_recovery_steps + 3):
        cc.tick(k * to_ps(p.increase_period_s))
        rates.append(cc.rate)
        targets.append(cc.target)
    # Fast recovery halves the distance to the target each period and does not raise the target...
    assert rates[0] == pytest.approx((cut + target) / 2) and rates[1] == pytest.approx((rates[0] + target) / 2)
    assert targets[:p.fast_recovery_steps] == [target] * p.fast_recovery_steps
    # ...then each period raises the target by one additive step, and the rate follows it.
    step = p.ai_fraction * LINE
    assert targets[-2:] == [pytest.approx(target + step), pytest.approx(target + 2 * step)]
    assert rates[-1] == pytest.approx((rates[-2] + target + 2 * step) / 2)


def test_alpha_decays_without_cnps():
    p = DcqcnParams()
    cc = Dcqcn(LINE, p)
    cc.tick(0)
    cc.on_cnp(0)
    cc.tick(10 * to_ps(p.alpha_period_s))
    assert cc.alpha == pytest.approx((1 - p.g) ** 10)  # the CNP restarted the alpha timer


def test_unknown_congestion_control_is_named():
    with pytest.raises(ValueError, match="unknown congestion control 'bbr'; known: dcqcn, none"):
        make("bbr", LINE)
