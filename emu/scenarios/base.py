"""Scenario: one of the seeds' claims as an experiment, in steps a reader can find.

A scenario is a dataclass whose fields are its typed parameters, checked
before anything is built (as a topology's are), so `Incast(senders=0)` is
one clear error. Its steps, each a method:

- `topologies()`: the fabric(s) it runs on, by role (most have one,
  `topology()`; fpf-vs-nsf builds two, dcqcn the same one twice);
- `measure(net, settings, role)`: what it does on one running fabric, and the
  figures it reads (everything its plot needs goes in them);
- `summarise(parts, settings)`: one result from the parts (one part: itself);
- `verdict(result)`: whether the claim held (None: it makes no claim here), and `missing(result)`
  what it could not measure (each a failed verdict's reason);
- `plot(result, ax)`: the figure, drawn from the result alone.

`run(settings, out_dir)` takes them in turn and writes NAME.json and, unless
told not to, NAME.png. `from_params` builds one from command-line strings.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.net.timebase import Timebase
from emu.scenarios.common import ScenarioError, save
from emu.topo.common import TopologyError
from emu.units import UnitError, parse_distance, parse_rate, parse_size, parse_time


@dataclass
class Scenario:
    name: ClassVar[str] = ""
    default_dilation: ClassVar[float] = 10_000.0  # where --dilation auto starts on an uncalibrated machine
    bmv2_lacks: ClassVar[str] = ""  # what BMv2 cannot do that it needs ("": it runs on both backends)
    # All its measured traffic is the project's own and runs inside the engine on the fabric clock:
    # `--clock fabric` (its default) gives exact figures with no D to choose.
    fabric_clock: ClassVar[bool] = False
    # It can run as the hosts' own traffic, their kernels' or BMv2's, on the wall clock at a D.
    wall_clock: ClassVar[bool] = True
    # The figures its verdict is made of (paths into the result, "a.b.0"): what a terminal shows first.
    headline: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.check()
        try:
            self.topologies()  # the fabrics' own checks too, before anything is built
        except TopologyError as exc:
            raise ScenarioError(f"{self.name}: {exc}") from None

    # -- parameters ------------------------------------------------------------------------

    def check(self) -> None:
        """ScenarioError if a parameter is impossible; units are read here, once."""

    @classmethod
    def from_params(cls, params: dict[str, str]) -> Scenario:
        """From `--key value` strings: ints and floats converted by the field's type, units kept as
        given (the scenario reads them in check())."""
        hints = typing.get_type_hints(cls)
        fields = [f.name for f in dataclasses.fields(cls)]
        typed: dict[str, Any] = {}
        for key, value in params.items():
            key = key.replace("-", "_")
            if key not in fields:
                raise ScenarioError(f"{cls.name}: unknown parameter {key!r}; known: {', '.join(fields) or 'none'}")
            kind = hints[key]
            try:
                typed[key] = int(value) if kind is int else float(value) if kind is float else value
            except ValueError:
                raise ScenarioError(f"{cls.name}: {key} must be {'an integer' if kind is int else 'a number'}, "
                                    f"got {value!r}") from None
        return cls(**typed)

    def parameters(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def as_size(self, field: str) -> int:
        """Parameter `field` ("512KiB") in bytes; ScenarioError naming it if it is not a size."""
        return _unit(self, field, parse_size)

    def as_rate(self, field: str) -> float:
        """Parameter `field` ("100G") in bits per second."""
        return _unit(self, field, parse_rate)

    def as_time(self, field: str) -> float:
        """Parameter `field` ("5us") in seconds."""
        return _unit(self, field, parse_time)

    def as_distance(self, field: str) -> float:
        """Parameter `field` ("2km") in metres."""
        return _unit(self, field, parse_distance)

    # -- steps -------------------------------------------------------------------------------

    def load_pps(self) -> float:
        """Packets per fabric second it offers at its peak: what --dilation auto sizes D for."""
        raise NotImplementedError

    def topology(self) -> Any:
        raise NotImplementedError

    def topologies(self) -> dict[str, Any]:
        return {"fabric": self.topology()}

    def settings(self, settings: RunSettings) -> RunSettings:
        """The run's settings as this scenario needs them (its own ECN thresholds, control timing)."""
        return settings

    def role_settings(self, role: str, settings: RunSettings) -> RunSettings:
        """The settings of the fabric built for `role` (a scenario comparing PFC, loss and trimming on
        the same fabric builds it three ways)."""
        return settings

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        raise NotImplementedError

    def collect(self, settings: RunSettings) -> dict[str, dict[str, Any]]:
        """Each fabric built in turn, measured, and torn down: the parts by role."""
        parts = {}
        for role, topo in self.topologies().items():
            mine = self.role_settings(role, settings)
            with FabricNet(topo, settings=mine) as net:
                net.engine.reset_fidelity()  # what measure() does is judged, the bring-up is not
                jobs = len(net.engine.speeds)
                parts[role] = self.measure(net, mine, role)
                self.costs.append(net.engine.speed(jobs))
        return parts

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        (only,) = parts.values()
        return only

    def verdict(self, result: dict[str, Any]) -> bool | None:
        return None

    def missing(self, result: dict[str, Any]) -> list[str]:
        """What the run set out to measure and did not get (a reply that never came): each a failed
        verdict's reason, in the result as `missing`. A verdict never reads a figure that is not there."""
        return []

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        raise NotImplementedError

    def file_name(self, settings: RunSettings) -> str:
        return self.name

    def run(self, settings: RunSettings, out_dir: str = "", *, plot: bool = True) -> dict[str, Any]:
        """The steps in turn; the result (JSON-ready) is written to out_dir/NAME.json, with its plot
        NAME.png unless `plot` is False."""
        clock = Timebase.of(settings)
        clock.admit(self.name, engine=self.fabric_clock, kernel=self.wall_clock)
        settings = self.settings(settings)
        self.costs: list[dict[str, Any]] = []  # what each fabric's jobs cost the machine (collect)
        figures = self.summarise(self.collect(settings), settings)
        if isinstance(figures.get("fidelity"), dict):
            clock.with_speed(figures["fidelity"], self.costs)  # the machine's share, beside the verdict
        result = {"scenario": self.name, **clock.result_fields(settings), "parameters": self.parameters(), **figures}
        if not settings.kernel:
            result["kernel"] = False  # built without the hosts' kernels: nothing of theirs crossed it
        if settings.machines:
            result["machines"] = list(settings.machines)  # each fabric over those it could be split across
        passed = self.verdict(result)
        missing = self.missing(result)
        if missing:
            result["missing"] = missing
            passed = False
        if passed is not None:
            result["passed"] = bool(passed)
        if out_dir:
            save(out_dir, self.file_name(settings), result, (lambda ax: self.plot(result, ax)) if plot else None)
        return result


def _unit(s: Scenario, field: str, parse: Any) -> Any:
    try:
        return parse(getattr(s, field))
    except UnitError as exc:
        raise ScenarioError(f"{s.name}: {field}: {exc}") from None
