"""Scenarios: the seeds' claims as runnable experiments, each a JSON result and a PNG plot."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emu.net.switch import RunSettings
from emu.topo.common import TopologyError


def run_scenario(name: str, params: dict[str, str], settings: RunSettings, *, out_dir: str,
                 dilation_given: bool = False) -> dict[str, Any]:
    if name == "incast":
        from emu.scenarios import incast

        if not dilation_given:
            settings = replace(settings, dilation=incast.DEFAULT_DILATION)
        return incast.run(params, settings, out_dir)
    raise TopologyError(f"unknown scenario {name!r}; known: incast")
