"""Is the engine keeping its schedule? Lateness against a fabric-time budget."""

from __future__ import annotations

from typing import Any

# A callback running later than this (in wall time) distorts a 1 us fabric cable at D = 1000.
DEFAULT_BUDGET_S = 1e-3


def fidelity_warnings(stats: dict[str, Any], budget_s: float = DEFAULT_BUDGET_S) -> list[str]:
    """One line per worker whose p99 lateness exceeds the budget: the machine cannot keep up."""
    out = []
    d = stats["dilation"]
    for w in stats["workers"]:
        p99 = w["fidelity"]["p99_s"]
        if p99 > budget_s:
            out.append(
                f"worker {w['worker']} ran p99 {p99 * 1e3:.2f} ms late (= {p99 / d * 1e9:.0f} ns of fabric time "
                f"at D={d:g}); results are distorted: raise --dilation or use a smaller fabric"
            )
    return out
