"""emu.collectives.ringsteps: a ring's steps as runs are the list they replace, step for step, at a size
that does not grow with the ring."""
import sys

import pytest

from emu.collectives.ringsteps import RingSteps


def _listed(n: int, r: int) -> list[tuple[int, str, bool]]:
    """The steps as Ring built them before runs: reduce-scatter, then all-gather from chunk r + 1."""
    return ([((r - s) % n, "stage", True) for s in range(n - 1)]
            + [((r + 1 - s) % n, "data", False) for s in range(n - 1)])


@pytest.mark.parametrize("n", [1, 2, 3, 8, 65])
def test_runs_give_every_rank_the_steps_of_the_list(n):
    for r in range(n):
        steps = RingSteps(n, [(r, n - 1, "stage", True)]) + RingSteps(n, [(r + 1, n - 1, "data", False)])
        assert len(steps) == 2 * (n - 1)
        assert list(steps) == _listed(n, r)
        assert [steps[s] for s in range(-len(steps), 0)] == _listed(n, r)
        assert RingSteps.of(_listed(n, r), n).runs == steps.runs  # a list becomes the same runs


def test_a_list_that_is_not_a_ring_keeps_each_step():
    odd = [(0, "stage", False), (5, "stage", False), (4, "stage", False), (4, "data", True)]
    steps = RingSteps.of(odd, 8)
    assert list(steps) == odd and len(steps.runs) == 3


def test_a_ring_of_4096_ranks_holds_its_steps_in_a_few_numbers():
    n = 4096
    steps = RingSteps(n, [(7, n - 1, "stage", True), (8, n - 1, "data", False)])
    listed = _listed(n, 7)
    assert steps[0] == listed[0] and steps[n - 1] == listed[n - 1] and steps[2 * n - 3] == listed[-1]
    held = sys.getsizeof(steps) + sys.getsizeof(steps.runs) + sum(sys.getsizeof(r) for r in steps.runs)
    as_list = sys.getsizeof(listed) + sum(sys.getsizeof(t) for t in listed)
    assert held < 1000 < as_list // 100


@pytest.mark.parametrize("bad", [[(0, -1, "stage", True)], [(0, 1, "elsewhere", False)]])
def test_steps_that_cannot_be_are_refused(bad):
    with pytest.raises(ValueError, match="ring steps over"):
        RingSteps(4, bad)
    with pytest.raises(IndexError):
        RingSteps(4, [(0, 2, "data", False)])[2]
    with pytest.raises(ValueError, match="one of 0..3, not 4"):
        RingSteps.of([(4, "data", False)], 4)
