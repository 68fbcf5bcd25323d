"""Scenarios: the seeds' claims as runnable experiments, each a JSON result and a PNG plot."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

from emu.net.switch import RunSettings
from emu.scenarios.common import ScenarioError

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
                 dilation_given: bool = False) -> dict[str, Any]:
    if name not in SCENARIOS:
        raise ScenarioError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
    module = importlib.import_module(SCENARIOS[name])
    lacks = getattr(module, "BMV2_LACKS", "")
    if settings.backend == "bmv2" and lacks:  # said before anything is built
        raise ScenarioError(f"{name} cannot run on --backend bmv2: {lacks}")
    if getattr(module, "AUTO_DILATION", False):  # it picks D per run itself unless one is given
        return module.run(params, settings, out_dir, auto=not dilation_given)
    if not dilation_given:
        settings = replace(settings, dilation=getattr(module, "DEFAULT_DILATION", settings.dilation))
    return module.run(params, settings, out_dir)
