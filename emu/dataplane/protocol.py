"""The engine's control protocol: each request one typed message, defined once for both ends.

The engine (emu/dataplane/engine.py) sends these to a worker's control socket
as one JSON line; the worker (emu/dataplane/worker.py) decodes them back into
the same classes and dispatches on the class. A message with an unknown type
or wrong fields is refused with one error line, never acted on. Replies stay
plain JSON objects with `ok` and, on failure, `error`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any


class ProtocolError(ValueError):
    """A control message that is not one of the requests below, or has the wrong fields."""


@dataclass(frozen=True)
class Ping:
    """Is the worker up? Answers with its index, its switches and its fabric time (`now_ps`)."""


@dataclass(frozen=True)
class Stats:
    """Counters of the worker's switches and its lateness (fidelity) summary."""


@dataclass(frozen=True)
class ResetFidelity:
    """Start a new measurement window for the worker's lateness (what Stats reports): set-up is not judged."""


@dataclass(frozen=True)
class SetPort:
    switch: str
    port: str
    up: bool


@dataclass(frozen=True)
class Degrade:
    """A port's link degraded (both directions where the port faces a host): frames lost with
    probability `loss`, the wire at `rate_bps` (0: as built), `delay_s` more (fabric s). All zero
    restores it. `seed` varies which frames the same loss takes (a repetition's seed)."""

    switch: str
    port: str
    loss: float
    rate_bps: float
    delay_s: float
    seed: int = 0


@dataclass(frozen=True)
class SetTables:
    switch: str
    tables: dict[str, Any]  # SwitchTables.to_dict()


@dataclass(frozen=True)
class SetHeadroom:
    switch: str
    port: str
    bytes: int


@dataclass(frozen=True)
class Probe:
    """Send `count` probes across one link, `spacing_s` apart (wall seconds); answers a probe id."""

    switch: str
    port: str
    count: int = 5
    spacing_s: float = 0.002


@dataclass(frozen=True)
class ProbeResult:
    switch: str
    probe: int


@dataclass(frozen=True)
class SampleQueues:
    """Sample the bytes queued on these (switch, port) egress ports every `interval_s` of fabric time."""

    ports: list[list[str]]
    interval_s: float
    max: int = 50_000


@dataclass(frozen=True)
class QueueSamples:
    """The samples taken since SampleQueues."""


@dataclass(frozen=True)
class RunJob:
    """Run a job of the project's own inside the engine (`kind`: its class, Job.kind(), e.g.
    "emu.collectives.job:CollectiveJob"), with its parameters; answers a job id once it is built. `hold`: built, not started
    (a split fabric's part, started by StartJob once every part is built)."""

    kind: str
    params: dict[str, Any]
    hold: bool = False


@dataclass(frozen=True)
class StartJob:
    """Start a held job (RunJob.hold) at `at`, the fabric instant every worker agreed on; paced (the wall
    clock), the wall meets it at `wall_at`, an instant of the workers' common clock
    (emu.dataplane.channel.common_offset, wall seconds)."""

    job: int
    at: int  # picoseconds
    wall_at: float = -1.0


@dataclass(frozen=True)
class Connect:
    """A split fabric's worker connects its channels: `peers[i]` is worker i's channel address [host, port]
    (what its Ping answered); each connects to the workers numbered above it."""

    peers: list[list[Any]]


@dataclass(frozen=True)
class JobResult:
    """A job's state: `done` false while it runs (with the fabric time so far), else its result."""

    job: int


@dataclass(frozen=True)
class SetPace:
    """Fabric clock: while a job runs, a fabric second takes at least `wall_s` wall seconds (0: as fast
    as the CPU allows), so that a person can watch it; the result is the same at any pace."""

    wall_s: float


@dataclass(frozen=True)
class Stop:
    """End the worker's loop."""


Request = (Ping | Stats | ResetFidelity | SetPort | Degrade | SetTables | SetHeadroom | Probe | ProbeResult | SampleQueues | QueueSamples
           | RunJob | StartJob | JobResult | SetPace | Connect | Stop)
REQUESTS: dict[str, type] = {c.__name__: c for c in (Ping, Stats, ResetFidelity, SetPort, Degrade, SetTables, SetHeadroom, Probe,
                                                      ProbeResult, SampleQueues, QueueSamples, RunJob, StartJob, JobResult,
                                                      SetPace, Connect, Stop)}


def encode(msg: Request) -> bytes:
    return json.dumps({"type": type(msg).__name__, **asdict(msg)}).encode() + b"\n"


def decode(line: bytes) -> Request:
    try:
        d = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise ProtocolError("a request is a JSON object")
    cls = REQUESTS.get(str(d.pop("type", "")))
    if cls is None:
        raise ProtocolError(f"unknown request type; known: {', '.join(REQUESTS)}")
    names = {f.name for f in fields(cls)}
    if set(d) - names:
        raise ProtocolError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(set(d) - names))}")
    try:
        return cls(**d)
    except TypeError as exc:
        raise ProtocolError(f"{cls.__name__}: {exc}") from None


__all__ = ["REQUESTS", "Connect", "JobResult", "RunJob", "Ping", "Probe", "ProbeResult", "ProtocolError", "QueueSamples", "Request", "ResetFidelity", "SampleQueues",
           "SetHeadroom", "SetPace", "SetPort", "Degrade", "SetTables", "StartJob", "Stats", "Stop", "decode", "encode"]
