"""Fabric time in whole picoseconds (emu.simtime): the rules, and the compiled core's twin giving the same
answers bit for bit. No root, no namespaces."""

from __future__ import annotations

import random
from typing import Any

import pytest

from emu import simtime
from emu.dataplane.core import native
from emu.units import parse_time, propagation_delay

IMPLS: list[Any] = [simtime] + ([native()] if native() is not None else [])
IDS = ["python"] + (["native"] if native() is not None else [])


@pytest.fixture(params=IMPLS, ids=IDS)
def impl(request):
    return request.param


def test_a_delay_in_the_users_units_becomes_whole_picoseconds(impl):
    assert impl.to_ps(parse_time("2us")) == 2_000_000
    assert impl.to_ps(parse_time("1.5ms")) == 1_500_000_000
    assert impl.to_ps(parse_time("300ns")) == 300_000
    assert impl.to_ps(parse_time("7ps")) == 7
    assert impl.to_ps(propagation_delay(2000.0)) == 10_000_000  # 2 km of fibre: 10 us
    assert type(impl.to_ps(1e-6)) is int


def test_halves_round_to_even_and_the_rest_to_the_nearest(impl):
    assert [impl.to_ps(x * 1e-12) for x in (0.5, 1.5, 2.5, -0.5, -1.5)] == [0, 2, 2, 0, -2]
    assert impl.to_ps(0.4e-12) == 0 and impl.to_ps(0.6e-12) == 1
    # 0.1 s + 0.2 s is not 0.3 s in float seconds; in picoseconds the sum is exact
    assert 0.1 + 0.2 != 0.3 and impl.to_ps(0.1) + impl.to_ps(0.2) == impl.to_ps(0.3)


def test_back_to_seconds_at_the_edges(impl):
    assert impl.to_s(2_000_000) == 2e-6
    assert impl.to_s(1) == 1e-12
    assert impl.to_s(0) == 0.0
    assert impl.to_s(impl.to_ps(1.25e-3)) == 1.25e-3


def test_what_is_not_a_time_in_int64_picoseconds_is_refused(impl):
    for bad in (float("inf"), float("nan"), 1e7, -1e7):
        with pytest.raises(OverflowError):
            impl.to_ps(bad)
    assert impl.to_ps(9e6) == 9 * 10**18  # 104 days: inside


def test_a_frames_time_on_a_wire_is_exact_and_rounds_halves_up(impl):
    assert impl.ser_ps(1500, 100_000_000_000) == 120_000  # 80 ps a byte at 100 Gb/s
    assert impl.ser_ps(1500, 400_000_000_000) == 30_000
    assert impl.ser_ps(1, 3_000_000_000) == 2667  # 2666.67
    assert impl.ser_ps(3, 16_000_000_000_000) == 2  # 1.5 ps: halves up
    assert impl.ser_ps(0, 100_000_000_000) == 0
    for bad in ((-1, 100_000_000_000), (1 << 20 << 1, 1), (1500, 0)):  # 2 MiB: the product leaves int64
        with pytest.raises(OverflowError):
            impl.ser_ps(*bad)
    assert impl.ser_ps(1_152_921, 1) == 9_223_368 * 10**12  # the largest that fits, on both cores
    assert impl.ser_ps(0xFFFF * 64, 100_000_000_000) == 335_539_200  # PFC's longest pause: 33.5 Mbit, exact
    assert impl.ser_ps(1 << 40, 1_000_000_000_000) == 8_796_093_022_208  # a TiB at 1 Tb/s: 8.8 s


def test_a_rate_that_is_not_whole_bits_per_second_is_rounded_once():
    assert simtime.rate_of(100e9) == 100_000_000_000
    assert simtime.rate_of(400e9 / 3) == 133_333_333_333
    with pytest.raises(ValueError):
        simtime.rate_of(0.0)
    with pytest.raises(TypeError):
        simtime.ser_ps(1500, 100e9)  # a float rate: rate_of first, as on the compiled core


@pytest.mark.skipif(native() is None, reason="the compiled core was not built: nothing to compare")
def test_both_cores_give_the_same_answers_bit_for_bit():
    c = native()
    rnd = random.Random(50)
    for _ in range(20000):
        s = rnd.choice([rnd.uniform(0, 1e-3), rnd.uniform(0, 10.0), rnd.randrange(1, 10**6) * 0.5e-12,
                        rnd.uniform(-1.0, 1.0) * 1e-9])
        assert c.to_ps(s) == simtime.to_ps(s), s
        ps = rnd.randrange(0, 1 << 62)
        assert c.to_s(ps) == simtime.to_s(ps), ps
        nbytes, rate = rnd.randrange(0, 1_152_922), rnd.randrange(1, 2 * 10**12)
        assert c.ser_ps(nbytes, rate) == simtime.ser_ps(nbytes, rate), (nbytes, rate)
        r = rnd.choice([rnd.uniform(0.5, 2e12), rnd.randrange(1, 10**12) + 0.5, 100e9 / rnd.randrange(1, 64)])
        assert c.rate_of(r) == simtime.rate_of(r), r  # halves to even on both
        nbytes, rate = rnd.randrange(1_152_922, 1 << 40), rnd.randrange(10**6, 2 * 10**12)  # past 64 bits' product
        assert c.ser_ps(nbytes, rate) == simtime.ser_ps(nbytes, rate), (nbytes, rate)
