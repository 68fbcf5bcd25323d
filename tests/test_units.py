import pytest

from emu.units import (
    Dilation,
    UnitError,
    format_rate,
    format_size,
    format_time,
    parse_distance,
    parse_rate,
    parse_size,
    parse_time,
    propagation_delay,
)


@pytest.mark.parametrize("text,bps", [("100G", 100e9), ("400Gbps", 400e9), ("10M", 10e6), ("1.6T", 1.6e12), (5, 5.0)])
def test_rates(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text,s", [("2us", 2e-6), ("1.5ms", 1.5e-3), ("300ns", 3e-7), ("1s", 1.0)])
def test_times(text, s):
    assert parse_time(text) == pytest.approx(s)


@pytest.mark.parametrize("text,n", [("4KiB", 4096), ("9000", 9000), ("1MB", 10**6), ("1M", 1 << 20)])
def test_sizes(text, n):
    assert parse_size(text) == n


def test_fibre_is_five_microseconds_per_kilometre():
    assert propagation_delay(parse_distance("50km")) == pytest.approx(250e-6)


@pytest.mark.parametrize("bad", ["", "fast", "10Q", "-5G", "1e", True])
def test_bad_quantities_say_what_was_expected(bad):
    with pytest.raises(UnitError, match="rate"):
        parse_rate(bad)


def test_dilation_maps_both_ways():
    d = Dilation(1000)
    assert d.wall_rate(400e9) == pytest.approx(400e6)
    assert d.wall_time(1e-6) == pytest.approx(1e-3)
    assert d.fabric_time(d.wall_time(3e-6)) == pytest.approx(3e-6)
    with pytest.raises(UnitError):
        Dilation(0.5)


def test_formatting():
    assert format_rate(100e9) == "100Gb/s"
    assert format_time(2e-6) == "2us"
    assert format_size(4096) == "4KiB"
