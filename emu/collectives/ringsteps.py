"""A ring's steps as runs of arithmetic, not a list: memory that does not grow with the ring.

At step s of a run, rank r sends chunk (first - s) mod n into its right neighbour's `dst` region
("stage" or "data") and, when the run reduces, the chunk it receives is added into its data. An
allreduce is two such runs (reduce-scatter, then all-gather) of n - 1 steps each. Held as a list, a
rank's steps are 2(n - 1) tuples: about 0.8 MB a rank at n = 4096, 3.3 GB for the ring, alive for
the whole collective; as runs they are a few numbers, and both cores read a step by its index.
"""

from __future__ import annotations

from collections.abc import Sequence

Run = tuple[int, int, str, bool]  # first chunk, steps, destination region, whether the received chunk reduces


class RingSteps(Sequence):
    """What Ring.ring runs: step s is (chunk, dst, reduce), computed when asked."""

    __slots__ = ("n", "runs", "_len")

    def __init__(self, n: int, runs: list[Run]) -> None:
        if n < 1 or any(count < 0 or dst not in ("stage", "data") for _, count, dst, _ in runs):
            raise ValueError(f"ring steps over {n} ranks: runs of (first, count >= 0, 'stage'|'data', reduce), "
                             f"not {runs!r}")
        self.n = n
        self.runs = [(first % n, count, dst, bool(red)) for first, count, dst, red in runs if count]
        self._len = sum(count for _, count, _, _ in self.runs)

    @classmethod
    def of(cls, steps: Sequence[tuple[int, str, bool]], n: int) -> RingSteps:
        """Any list of steps as runs (a run goes on while each step's chunk is the one before it less one)."""
        if isinstance(steps, RingSteps):
            return steps
        runs: list[list] = []
        for c, dst, red in steps:
            if not 0 <= c < n:
                raise ValueError(f"a ring step's chunk is one of 0..{n - 1}, not {c}")
            last = runs[-1] if runs else None
            if last and last[2] == dst and last[3] == bool(red) and (last[0] - last[1]) % n == c:
                last[1] += 1
            else:
                runs.append([c, 1, dst, bool(red)])
        return cls(n, [tuple(r) for r in runs])

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, s: int) -> tuple[int, str, bool]:  # type: ignore[override]
        if s < 0:
            s += self._len
        if not 0 <= s < self._len:
            raise IndexError(f"step {s} of {self._len}")
        for first, count, dst, red in self.runs:
            if s < count:
                return ((first - s) % self.n, dst, red)
            s -= count
        raise AssertionError("unreachable: the runs' counts add up to the length")

    def __add__(self, other: RingSteps) -> RingSteps:
        if not isinstance(other, RingSteps) or other.n != self.n:
            return NotImplemented
        return RingSteps(self.n, self.runs + other.runs)

    def __repr__(self) -> str:
        return f"RingSteps({self.n}, {self.runs!r})"
