"""The one place a fabric's data plane is chosen.

A backend starts the data plane of a whole fabric from what the control
plane computed (the switches' specs and table entries) and returns it; the
controller then drives it through one protocol: set tables, set a port,
read stats, stop. Two implementations: the native engine, and BMv2
simple_switch running p4/fabric.p4 (emu.backends.bmv2). FabricSwitch asks
for the backend its RunSettings name, the way Mininet takes `switch=`; so
FabricNet, a plain Mininet() and `mn --custom` build either the same way,
and tests parametrise by backend name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from emu.dataplane.engine import Engine

if TYPE_CHECKING:
    from emu.net.switch import BuiltFabric, FabricSwitch, RunSettings

# name -> "module:class"; imported when asked for, so the native path never loads a backend it does not use
BACKENDS = {"native": "emu.net.backend:NativeBackend", "bmv2": "emu.backends.bmv2.switch:Bmv2Backend"}


class DataPlane(Protocol):
    """What FabricController drives; `stats()` is in the engine's layout (a backend fills what it counts)."""

    def set_tables(self, switch: str, tables: Any, extra: list[str] | None = None) -> None: ...
    def set_port(self, switch: str, port: str, up: bool) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def cpu_seconds(self) -> float: ...  # CPU time its processes have used so far (benchmarks divide by it)
    def peak_rss_bytes(self) -> int: ...  # the most memory its processes held at once, summed
    def reset_fidelity(self) -> None: ...  # a new lateness window: what follows is measured, set-up is not
    # What each fabric-clock job that ended cost the machine (core, packet-hops, wall and CPU seconds),
    # and their sum from the `since`-th on; a data plane that runs no such job keeps the list empty.
    speeds: list[dict[str, Any]]
    def speed(self, since: int = 0) -> dict[str, Any]: ...
    def stop(self) -> None: ...

    # Run before a fabric-clock job starts (FabricSwitch sets the controller's settle): Engine.start_job.
    before_job: Callable[[], None] | None


class Backend(Protocol):
    def check(self, settings: RunSettings, switches: list[str]) -> None:
        """Everything knowable wrong before anything is made (tools, ports, link modes) for these
        switches (by name): one clear error."""

    def start(self, switches: tuple[FabricSwitch, ...], built: BuiltFabric, settings: RunSettings) -> DataPlane:
        """The running data plane of these switches; on failure, nothing of it is left."""


class NativeBackend:
    """The engine: one set of worker processes for the whole fabric."""

    def check(self, settings: RunSettings, switches: list[str]) -> None:
        pass

    def start(self, switches: tuple[FabricSwitch, ...], built: BuiltFabric, settings: RunSettings) -> DataPlane:
        engine = Engine(built.spec, owns_run_dir=not switches[0].run_dir)
        engine.start()
        return engine


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["BACKENDS", "Backend", "DataPlane", "NativeBackend", "backend"]
