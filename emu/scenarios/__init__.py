"""Scenarios: the seeds' claims as runnable experiments, each a JSON result and a PNG plot.

Each is a Scenario class (emu.scenarios.base) registered here by name;
`run_scenario` builds one from command-line strings and runs it at the D
asked for, or at the smallest D this machine keeps it on time at.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from emu.net.dilation import cost_of, run_auto
from emu.net.switch import RunSettings
from emu.net.timebase import Timebase
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError

BMV2_COST = 7.0  # engine packets per BMv2 packet, measured (6.8 in docs/performance.md)

# name -> "module:class", imported when asked for
SCENARIOS = {
    "incast": "emu.scenarios.incast:Incast",
    "plane-down": "emu.scenarios.plane_down:PlaneDown",
    "srv6-te": "emu.scenarios.srv6_te:Srv6Te",
    "fpf-vs-nsf": "emu.scenarios.fpf_vs_nsf:FpfVsNsf",
    "headroom": "emu.scenarios.headroom:Headroom",
    "wcmp": "emu.scenarios.wcmp:Wcmp",
    "dcqcn": "emu.scenarios.dcqcn:Dcqcn",
    "roce-plane-down": "emu.scenarios.roce_plane_down:RocePlaneDown",
    "bag-collective": "emu.scenarios.bag_collective:BagCollective",
    "trimming": "emu.scenarios.trimming:Trimming",
    "congestion-spreading": "emu.scenarios.congestion_spreading:CongestionSpreading",
    "degraded-plane": "emu.scenarios.degraded_plane:DegradedPlane",
    "replica-exclusion": "emu.scenarios.replica_exclusion:ReplicaExclusion",
    "tenants": "emu.scenarios.tenants:Tenants",
    "distance-cliff": "emu.scenarios.distance_cliff:DistanceCliff",
}


def scenario_class(name: str) -> type[Scenario]:
    if name not in SCENARIOS:
        raise ScenarioError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
    module, cls = SCENARIOS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def run_scenario(name: str, params: dict[str, str], settings: RunSettings, *, out_dir: str,
                 dilation: float | str = "auto", say: Callable[[str], None] | None = None,
                 plot: bool = True) -> dict[str, Any]:
    """Run scenario `name` with parameters from strings. `dilation` replaces the settings' D: a number,
    or "auto", the smallest D this machine keeps the scenario on time at (from its offered load and what
    runs here have taught, emu.net.dilation), retried larger while the result's fidelity is not ok."""
    cls = scenario_class(name)
    if settings.backend == "bmv2" and cls.bmv2_lacks:  # said before anything is built
        raise ScenarioError(f"{name} cannot run on --backend bmv2: {cls.bmv2_lacks}")
    scenario = cls.from_params(params)  # its parameters checked, before anything is built
    clock = Timebase.of(settings)
    try:
        clock.admit(name, engine=cls.fabric_clock, kernel=cls.wall_clock)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None

    def at(d: float) -> dict[str, Any]:
        return scenario.run(replace(settings, dilation=d), out_dir, plot=plot)

    def auto() -> dict[str, Any]:
        # The scenario's documented default D, at its default load, is where an uncalibrated machine starts;
        # BMv2 forwards about a seventh of what the engine does (docs/performance.md, emu bench engine).
        start = cost_of(cls.default_dilation, cls().load_pps()) * (BMV2_COST if settings.backend == "bmv2" else 1)
        return run_auto(at, scenario.load_pps(), f"scenario-{name}-{settings.backend}",
                        say=say or (lambda m: print(m, file=sys.stderr)), default_cost=start)

    return clock.run_at(dilation, at, auto, default=settings.dilation)
