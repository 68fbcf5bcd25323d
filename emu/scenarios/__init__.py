"""Scenarios: the seeds' claims as runnable experiments, each a JSON result and a PNG plot."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from emu.bench.dilation import cost_of, run_auto
from emu.net.switch import RunSettings
from emu.scenarios.common import ScenarioError

BMV2_COST = 7.0  # engine packets per BMv2 packet, measured (6.8 in docs/performance.md)

SCENARIOS = {
    "incast": "emu.scenarios.incast",
    "plane-down": "emu.scenarios.plane_down",
    "srv6-te": "emu.scenarios.srv6_te",
    "fpf-vs-nsf": "emu.scenarios.fpf_vs_nsf",
    "headroom": "emu.scenarios.headroom",
    "wcmp": "emu.scenarios.wcmp",
    "dcqcn": "emu.scenarios.dcqcn",
    "roce-plane-down": "emu.scenarios.roce_plane_down",
    "bag-collective": "emu.scenarios.bag_collective",
}


def run_scenario(name: str, params: dict[str, str], settings: RunSettings, *, out_dir: str,
                 dilation: float | str = "auto", say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run scenario `name`. `dilation` replaces the settings' D: a number, or "auto", the smallest D
    this machine keeps the scenario on time at (from its offered load and what runs here have taught,
    bench.dilation), retried larger while the result's fidelity is not ok."""
    if name not in SCENARIOS:
        raise ScenarioError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
    module = importlib.import_module(SCENARIOS[name])
    lacks = getattr(module, "BMV2_LACKS", "")
    if settings.backend == "bmv2" and lacks:  # said before anything is built
        raise ScenarioError(f"{name} cannot run on --backend bmv2: {lacks}")
    if dilation != "auto":
        settings = replace(settings, dilation=float(dilation))
    if getattr(module, "AUTO_DILATION", False):  # it picks D per run itself
        return module.run(params, settings, out_dir, auto=dilation == "auto")
    if dilation != "auto":
        return module.run(params, settings, out_dir)
    # The scenario's documented default D, at its default load, is where an uncalibrated machine starts;
    # BMv2 forwards about a seventh of what the engine does (docs/performance.md, emu bench engine).
    start_cost = cost_of(module.DEFAULT_DILATION, module.load_pps({})) * (BMV2_COST if settings.backend == "bmv2" else 1)
    return run_auto(lambda d: module.run(params, replace(settings, dilation=d), out_dir), module.load_pps(params),
                    f"scenario-{name}-{settings.backend}", say=say or (lambda m: print(m, file=sys.stderr)),
                    default_cost=start_cost)
