"""What a job is to the engine, whatever it runs (RDMA endpoints, UDP flows).

A job lives inside an engine worker (emu.dataplane.worker starts it by kind,
from a module above this one): the worker hands it its loop and the host
ports it may attach to (`Attach`), and the job's base (`Job`) keeps its life:
one start instant, a budget of fabric time, the failures it schedules, and
the end that hands fabric time back to the wall. The loop's time is whole
picoseconds of fabric time on either clock (emu.dataplane.loop: the wall clock
paces it at D): a job's parameters in seconds (a request's, a person's) become
picoseconds where the job reads them, and its results seconds again (`since`).
It sits here, beside the worker, so that every kind of job (emu.roce,
emu.collectives, emu.traffic) imports it downward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from emu.clock import ClockKind
from emu.simtime import to_ps, to_s


class Attach(Protocol):
    """What the engine gives a fabric-clock job (emu.dataplane.worker.Worker): its loop, its core, and a
    host's ports."""

    loop: Any
    core: str  # "native" or "python" (emu.dataplane.core): which endpoints a job builds on it

    def attach(self, switch: str, port: str, on_frame: Callable[[int, Any], None]
               ) -> tuple[Callable[[Any], None], bytes, bytes]:
        """Frames for UDP 4791 arriving at the host behind (switch, port) go to on_frame(t, frame);
        returns send(frame) into that port's NIC model, the host's MAC and the switch port's."""
        ...

    def attach_udp(self, switch: str, port: str, udp_port: int,
                   on_frame: Callable[[int, Any], None] | None) -> None:
        """UDP frames (IPv4 or IPv6) to `udp_port` arriving at the host behind (switch, port) go to
        on_frame(t, frame); None gives them back to the host's kernel."""
        ...

    def set_port(self, switch: str, port: str, up: bool) -> None:
        """A switch port down or up now, as a failure the job schedules in fabric time."""
        ...

    def hosts(self, switch: str, port: str) -> bool:
        """Whether this worker runs the host behind (switch, port): on a fabric split over workers, each
        runs the part of a job whose hosts run there (a host's cables to other workers' switches cut)."""
        ...

    def carries(self, switch: str, port: str) -> bool:
        """Whether this worker runs port (switch, port), or its cut cable's end at the host: where a
        failure of the port must be applied."""
        ...

    def tell(self, job: Any, payload: Any) -> None:
        """`job.heard(t, payload)` on every part of the job (this one included), one lookahead from now
        (at once on a fabric that is not split): how a job's parts on several workers agree, e.g. that
        every rank has finished a size. `payload`: JSON-able."""
        ...


class Detached:
    """A stand-in for a host another worker runs: what is built on it (a rank's device, so that its
    queue pair numbers and keys are known to the local ranks) can never send or receive."""

    def __init__(self, host: Attach) -> None:
        self.loop = host.loop
        self.core = host.core

    def attach(self, switch: str, port: str, on_frame: Callable[[int, Any], None]
               ) -> tuple[Callable[[Any], None], bytes, bytes]:
        def send(frame: Any) -> None:
            raise RuntimeError(f"a stand-in for the host behind {switch}/{port} (another worker's) sent a frame")

        return send, bytes(6), bytes(6)


class Participant(Protocol):
    """A part of a job that may still be working when the job ends (a MetaRoCE endpoint)."""

    name: str

    def busy(self) -> bool:
        """Still running an operation."""
        ...

    def describe(self) -> str:
        """What it is doing, for a stuck job's reason."""
        ...

    def stop(self) -> None:
        ...


class Job:
    """A job's life inside the engine: it is built (its constructor: endpoints, memory, plans, the costly
    part), then started (`go`): it begins at one instant (the loop's begin) and does what comes first
    (`kick`). It fails with its reason if it has not finished within `params["budget_s"]` of fabric time
    (stuck, not slow: on the fabric clock nothing can be slow), and once finished hands fabric time back
    to the wall. Subclasses fill `participants`, say what they do (`what()`), give their `result()`
    and call finish() when done.

    Built and started apart so that the parts of a split job can all be built before any starts: their
    common start instant is then chosen once every part is ready (Engine.start_job), and building one,
    however long it takes, makes none late."""

    # The clocks the kind runs on (EngineSpec.clock): both, as its durations are fabric seconds on either;
    # a kind written for the fabric clock alone says so.
    clocks: ClassVar[tuple[ClockKind, ...]] = tuple(ClockKind)

    @classmethod
    def kind(cls) -> str:
        """How a request names this kind (RunJob.kind): where its class is, "module:Class"."""
        return f"{cls.__module__}:{cls.__qualname__}"

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        self.host = host
        self.loop = host.loop
        self.params = params
        self.error = ""
        self.finished = False
        self.participants: list[Participant] = []
        self.t0 = 0  # picoseconds
        self.begun = False  # started (go): its times count from t0
        self.on_finish: list[Callable[[], None]] = []  # the engine's meter of the job's cost, stopped at its end

    def go(self, *part: int | str) -> None:
        """Start: begin at one instant, then do what comes first, as the origin "begin" (and `part`: which
        part of a job of several this is); what a host starts, it names by the host (as_origin)."""
        with self.loop.origin("begin", *part):
            self.begin()
            self.kick()

    def as_origin(self, *tags: int | str) -> Any:
        """Schedule as the origin named by `tags`, a context: what a part of a split job starts (a host's
        operation, a port's failure) takes the tie keys it takes on one worker (emu.dataplane.schedule).
        Named by what it is (a host and the operation it starts, e.g. "allreduce" of 1 MiB), not by the
        job's number or the operation's place in a list, so that the same operation on the same hosts
        breaks its ties alike alone, in a replay or beside another job."""
        return self.loop.origin(*tags)

    def kick(self) -> None:
        """What the job does at its start instant (t0): its first sends, its endpoints' first operations."""

    def begin(self) -> int:
        """Start at one fabric instant; schedule the budget's end and the job's port events
        (`params["port_events"]`: [after (fabric s from the start), up, [[switch, port], ...]] each):
        a failure on the fabric clock must come at a fabric time, as nothing outside the engine can
        act while a job runs."""
        # A part of a job of several (emu.collectives.job.Together) starts at the whole's instant, and the
        # whole, not the part, hands fabric time back to the wall.
        joined = self.params.get("joined_at")
        self.t0 = int(joined) if joined is not None else self.loop.begin(self.params.get("at"),
                                                                          self.params.get("wall_at"))
        self.begun = True
        self.loop.at(self.t0 + to_ps(float(self.params["budget_s"])), self._budget, None)
        for after, up, ports in self.params.get("port_events", []):
            self.loop.at(self.t0 + to_ps(float(after)), self._set_ports, (bool(up), ports))
        return self.t0

    def since(self, t: int, start: int | None = None) -> float:
        """Fabric seconds from `start` (the job's start by default) to `t`: a result's edge."""
        return to_s(t - (self.t0 if start is None else start))

    def _set_ports(self, t: int, arg: tuple[bool, list[list[str]]]) -> None:
        up, ports = arg
        for switch, port in ports:
            if self.host.carries(switch, port):  # each worker fails its own ports, at the same fabric time
                with self.as_origin("port", switch, port):
                    self.host.set_port(switch, port, up)

    def here(self, planes: list[list[Any]]) -> bool:
        """Whether this part runs the host on `planes` ([switch, port, ...] each): on a fabric split over
        workers, the worker the host runs on does; unsplit, the one worker runs every host."""
        return self.host.hosts(planes[0][0], planes[0][1])

    def attach_for(self, planes: list[list[Any]]) -> Attach:
        """What to build the host on `planes` on: this worker's ports if this part runs it, else a
        stand-in (Detached), so that every part builds every host alike (queue pairs, keys, seeds)."""
        return self.host if self.here(planes) else Detached(self.host)

    @staticmethod
    def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One result from the results of a split job's parts (worker order): what every part heard
        alike, and the longest part's fabric time. Kinds whose parts each know only their own hosts'
        share extend it."""
        return {**parts[0], "fabric_s": max(p["fabric_s"] for p in parts)}

    def tell(self, payload: Any) -> None:
        """`heard(t, payload)` on every part of this job, one lookahead from now (see Attach.tell)."""
        self.host.tell(self, payload)

    def heard(self, t: int, payload: Any) -> None:
        """What a part of this job told every part (see tell)."""

    def what(self) -> str:
        raise NotImplementedError

    def progress(self) -> str:
        """Where it stands, for a person watching (the live view): what it does, by default."""
        return self.what()

    def result(self) -> dict[str, Any]:
        raise NotImplementedError

    def _budget(self, t: int, _: Any) -> None:
        if not self.finished:
            busy = [f"{p.name}: {p.describe()}" for p in self.participants if p.busy()]
            self.fail(f"{self.what()} did not complete in {self.params['budget_s']:g} s of fabric time; "
                      f"{'; '.join(busy[:3])}")

    def fail(self, why: str) -> None:
        if not self.finished:
            self.error = why
            self.finish()

    def finish(self) -> None:
        self.finished = True
        for p in self.participants:
            p.stop()
        if self.begun and self.params.get("joined_at") is None:  # a job that never began holds no loop
            self.loop.end()
        for f in self.on_finish:
            f()
