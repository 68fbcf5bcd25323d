"""The suite's own helpers, where a mistake would let a test pass having checked nothing."""

from __future__ import annotations

import pytest

from tests.helpers import KEPT_D_FACTOR, on_time


def _runs(verdicts: list[bool | None]):
    tried: list[float] = []

    def run(d: float) -> dict:
        ok = verdicts[len(tried)]
        tried.append(d)
        return {"d": d, "fidelity": {"ok": ok, "behind": [] if ok is not False else ["s1 sender"]}}

    return run, tried


def test_an_on_time_run_is_asserted_on_at_its_own_d():
    run, tried = _runs([True])
    assert on_time(run, 20000)["d"] == 20000 and tried == [20000]


def test_a_late_run_is_run_again_at_a_larger_d_and_that_one_asserted_on():
    run, tried = _runs([False, None])
    assert on_time(run, 20000)["d"] == 20000 * KEPT_D_FACTOR and tried == [20000, 20000 * KEPT_D_FACTOR]


def test_late_at_both_is_reported_as_late_not_asserted_on():
    run, tried = _runs([False, False])
    with pytest.raises(pytest.skip.Exception, match="NOT OK.*s1 sender"):
        on_time(run, 20000)
    assert len(tried) == 2


def test_a_run_known_late_at_its_d_starts_at_the_larger_one_and_is_still_judged():
    run, tried = _runs([None])
    assert on_time(run, 20000, known_late=True)["d"] == 20000 * KEPT_D_FACTOR and tried == [20000 * KEPT_D_FACTOR]
    run, tried = _runs([False])
    with pytest.raises(pytest.skip.Exception, match="NOT OK"):
        on_time(run, 20000, known_late=True)
    assert tried == [20000 * KEPT_D_FACTOR]
