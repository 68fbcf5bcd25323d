"""Reach a fabric that another process is running, through its workers' control sockets."""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from emu.dataplane.engine import RUN_ROOT, Engine, EngineError
from emu.dataplane.spec import EngineSpec


def running_engines() -> list[Engine]:
    engines = []
    for spec_path in sorted(glob.glob(os.path.join(RUN_ROOT, "run-*", "engine.json"))):
        with open(spec_path) as f:
            engine = Engine(EngineSpec.from_json(f.read()))
        if still_running(engine):
            engines.append(engine)
    return engines


def still_running(engine: Engine) -> bool:
    """Whether the fabric of `engine` (maybe another process's) still runs: its workers' sockets exist."""
    return bool(glob.glob(os.path.join(engine.run_dir, "worker-*.sock")))


def running_stats() -> dict[str, Any] | None:
    """Stats of the newest running fabric, or None if there is none; if the only fabrics found have a
    dead worker, the error says which worker died (a crashed run is not "no fabric")."""
    errors = []
    for engine in reversed(running_engines()):
        try:
            return engine.stats()
        except (OSError, EngineError) as exc:
            errors.append(f"{engine.run_dir}: {exc}")
    if errors:
        raise RuntimeError("the fabric found is not answering: " + errors[0])
    return None


def running_hosts() -> dict[str, int]:
    """Host name -> shell pid of the newest running fabric (from its run record)."""
    for path in sorted(glob.glob(os.path.join(RUN_ROOT, "run-*", "created.json")), reverse=True):
        with open(path) as f:
            hosts = json.load(f).get("hosts", {})
        if hosts and all(os.path.exists(f"/proc/{pid}") for pid in hosts.values()):
            return hosts
    return {}


def running_view() -> tuple[Engine, dict[str, Any]]:
    """The newest running fabric that recorded its drawing (FabricNet does at start): its engine and
    the record ({"topology": ..., "clock": ...})."""
    from emu.net.fabric import VIEW_RECORD

    for engine in reversed(running_engines()):
        path = os.path.join(engine.run_dir, VIEW_RECORD)
        if os.path.exists(path):
            with open(path) as f:
                return engine, json.load(f)
    raise RuntimeError("no running fabric to view: start one with `emu up ...` (or a script's FabricNet), or "
                       "give `emu up` --web")
