"""The run's clock, chosen once: what keeps fabric time and how a figure is judged.

ns-3's models call Schedule and Now and never ask whether the simulator
underneath is real-time; ours ask the fabric for traffic, writes and
collectives (`net.traffic(...)`, `net.roce.write(...)`, `net.collective(...)`)
and never ask which clock they are on. A `Timebase` is that choice, made from
`RunSettings.clock` when a FabricNet is built, and it owns what differs:

- who runs the project's endpoints: the engine itself on the fabric clock
  (exact, as fast as the CPU allows); on the wall clock the engine too, on
  its wall loop, and on BMv2 processes in the hosts whose frames cross the
  kernels and simple_switch at 1/D of the fabric's speed;
- converting between fabric and wall units: D is applied here (and in the
  endpoints' own processes, which are given it), so every figure handed up
  is in fabric units;
- the fidelity verdict: on the fabric clock nothing can be late and the
  verdict says what crossed the run from the kernels; on the wall clock every
  part that kept fabric time is judged by its lateness;
- how D is picked (`run_at`): on the wall clock `auto` searches for the
  smallest D this machine keeps on time; on the fabric clock D only paces the
  kernels' own frames between jobs, and nothing is searched.

The engine's event loop itself (emu.dataplane.loop) is chosen from the same
setting inside the engine's workers: that is the scheduler underneath.
Adding a clock is a subclass here and its loop there (docs/architecture.md).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from emu.clock import ClockKind, check_clock
from emu.fidelity import add_speeds, fabric_clock_verdict, fabric_fidelity, packet_time_s
from emu.net.flows import EngineFlows, Flow, KernelFlows
from emu.simtime import to_s

if TYPE_CHECKING:
    from emu.collectives.run import Tenant
    from emu.collectives.trace import Trace
    from emu.dataplane.job import Job
    from emu.net.fabric import FabricNet
    from emu.net.switch import RunSettings

R = TypeVar("R")
KERNEL_PACE_D = 1000.0  # fabric clock: the D the kernels' own frames cross at between jobs, unless given


class Timebase(ABC):
    """One run's clock. `clock`: its kind (the result's `clock`, and the engine's pacing: EngineSpec.clock).
    A clock is a subclass that says, for each abstract method, how it runs and judges that."""

    clock: ClassVar[ClockKind]

    def __init__(self, net: FabricNet) -> None:
        self.net = net

    @staticmethod
    def of(settings: RunSettings) -> type[Timebase]:
        return TIMEBASES[check_clock(settings.clock)]

    # -- before a fabric exists --------------------------------------------------------------

    @classmethod
    @abstractmethod
    def run_at(cls, dilation: float | str | None, at: Callable[[float], R], auto: Callable[[], R],
               default: float) -> R:
        """Run `at(D)`: at the D given, or (None / "auto") at what this clock picks: `auto()` on the wall
        clock, `default` where nothing needs picking."""

    @classmethod
    @abstractmethod
    def admit(cls, name: str, *, engine: bool, kernel: bool) -> None:
        """ValueError unless a run can measure on this clock: `engine`, its measured traffic can all run
        inside the engine; `kernel`, it can run as the hosts' own (their kernels', or BMv2's)."""

    @classmethod
    def result_fields(cls, settings: RunSettings) -> dict[str, Any]:
        """What a result says of the clock it was measured on."""
        return {"clock": cls.clock, "dilation": settings.dilation}

    @classmethod  # noqa: B027 (a clock where the CPU is not the limit adds nothing)
    def with_speed(cls, fidelity: dict[str, Any], costs: list[dict[str, Any]]) -> None:
        """Put what the run cost the machine (packet-hops, their rate, CPU per hop) beside the verdict,
        where the CPU was the only limit (nothing, where it was not)."""

    # -- on a running fabric -----------------------------------------------------------------

    @property
    def dilation(self) -> float:
        """Wall seconds a fabric second of the kernels' own traffic takes (on either clock)."""
        return self.net.settings.dilation

    def kernel_wall_s(self, fabric_s: float) -> float:
        """Wall seconds `fabric_s` of fabric time takes for the hosts' kernels and the control plane."""
        return fabric_s * self.dilation

    def sleep(self, fabric_s: float) -> None:
        """Let `fabric_s` of the control plane's and the kernels' fabric time pass."""
        time.sleep(self.kernel_wall_s(fabric_s))

    @abstractmethod
    def traffic(self, flows: list[Flow], *, fail_plane: tuple[int, float] | None = None
                ) -> EngineFlows | KernelFlows:
        """Paced UDP `flows`, started now; `fail_plane=(plane, fraction)`: that plane fails once the
        flow leaving by it has sent `fraction` of its bytes."""

    def perf(self, srcs: list[str], dst: str, *, nbytes: int, cc: str = "none", message: int = 1 << 20,
             fail_after: tuple[int, int] | None = None, timeout: float | None = None,
             trim_dscp: int | None = None, spray: str = "weighted") -> Perf:
        """MetaRoCE writers `srcs` each writing `nbytes` to `dst`; `fail_after=(plane, nbytes)`: that plane
        fails once the first writer's switch on it has forwarded `nbytes` (bytes), and is restored after.
        Inside the engine (a job: the failure at its fabric time, as nothing outside the engine can act
        while a fabric-clock job runs); `timeout` is for processes in the hosts (WallTime)."""
        from emu.roce.run import EnginePerf

        net = self.net
        planes = [net.host_planes(s) for s in srcs]
        events: list[tuple[float, bool, list[tuple[str, str]]]] = []
        ports: list[tuple[str, str]] = []
        if fail_after is not None:  # nothing outside the engine can act while the write runs: it does
            plane, after_bytes = fail_after
            ports = net.plane_ports(plane)
            events = [(after_bytes * 8 / planes[0][plane][3], False, ports)]
        run = EnginePerf(net.engine, planes, net.host_planes(dst), nbytes=nbytes, cc=cc, message=message,
                         lat_iters=0, port_events=events, trim_dscp=trim_dscp, spray=spray)
        try:
            clients, server = run.wait()
        finally:
            for sw, port in ports:
                net.engine.set_port(sw, port, True)
        return Perf(clients, server, run.kernel_frames, run.t0_fabric_s + events[0][0] if events else None)

    def collective(self, op: str, sizes: list[int], *, cc: str = "none", seed: int = 0, spray: str = "weighted",
                   algo: str | None = None, hosts: Sequence[str] | None = None,
                   planes: Sequence[int] | None = None, payload: str = "auto") -> dict[str, Any]:
        """Collective `op` with one rank per host over every plane it has (`sizes`: whole int32 chunks per
        rank; `algo`: emu.collectives.algorithms', the op's default if None; `hosts`, `planes`: only
        these hosts, in this rank order, over only these of their planes), summarised as nccl-tests
        does with the engine's counters and this clock's verdict."""
        from emu.collectives.run import MTU, payload_for, pick, summarise
        from emu.roce.transport import HEADERS

        net = self.net
        ranks = pick(net.rank_hosts(), hosts, planes)
        algo, why = self.resolve(op, ranks, sizes, algo)
        payload = payload_for(payload, op, len(ranks), sizes)
        if payload == "none" and not self.endpoints_inside():
            raise ValueError("--payload none runs the ranks inside the engine: on its own switches "
                             "(--backend native), not BMv2's, whose ranks are processes moving real bytes")
        trim = net.settings.trim[1] if net.settings.trim else None
        net.engine.reset_fidelity()  # the collective is measured, the fabric's bring-up is not
        results, kernel = self.collective_results(ranks, op, sizes, cc=cc, seed=seed, trim_dscp=trim, spray=spray,
                                                  algo=algo, payload=payload)
        stats = net.engine.stats()
        rate = min(rate for h in ranks for _, rate in h.ports)  # the slowest plane's: one packet's time
        fidelity = self.verdict(rate_bps=rate, frame_bytes=MTU + HEADERS, kernel_frames=kernel, endpoints=results,
                                stats=stats)
        return {**summarise(op, ranks, sizes, results, stats, fidelity, clock=self.clock,
                            dilation=self.result_fields(net.settings)["dilation"], seed=seed, algo=algo,
                            payload=payload),
                **({"algo_why": why} if why else {})}

    def resolve(self, op: str, ranks: list[Any], sizes: list[int], algo: str | None) -> tuple[str | None, str]:
        """`algo` as given, or for "auto" the one emu.collectives.algorithms' cost model predicts fastest
        on this fabric (its paths' lengths and rates), and why."""
        from emu.collectives import algorithms
        from emu.collectives.run import groups

        if algo != algorithms.AUTO:
            return algo, ""
        names = [h.name for h in ranks]
        bps = min(sum(rate for _, rate in h.ports) for h in ranks)
        return algorithms.choose(op, len(ranks), sizes, bps=bps, groups=groups(ranks),
                                 one_way=lambda i, j: self.net.one_way_s(names[i], names[j]),
                                 between_bps=self.net.group_capacity_bps)

    def endpoints_inside(self) -> bool:
        """Whether the project's endpoints (UDP flows, MetaRoCE writers, collective ranks) run inside the
        engine (on the fabric clock, always)."""
        return True

    def run_job(self, kind: type[Job], params: dict[str, Any]) -> dict[str, Any]:
        """A job of `kind` (an engine Job subclass) inside the engine, on whichever clock this is, waited
        for: its final state, `result` joined over a split fabric's parts (kind.merge) and
        `kernel_frames`. What a new endpoint kind's verb on FabricNet calls (docs/architecture.md)."""
        if not self.endpoints_inside():
            raise ValueError(f"a {kind.__name__} runs inside the engine: on its own switches (--backend native), "
                             "not BMv2's")
        engine = self.net.engine
        return engine.wait_job(engine.start_job(kind, params), kind.merge)

    def collectives(self, tenants: Sequence[Tenant]) -> list[dict[str, Any]]:
        """Several collectives started at one fabric instant, each on its own hosts (and planes), each
        summarised on its own (the engine's counters and packet-hops are the fabric's, shared)."""
        from emu.collectives.run import (
            MTU,
            job_params,
            pick,
            run_together_in_engine,
            summarise,
            whole_chunks,
        )
        from emu.roce.transport import HEADERS
        from emu.units import parse_size

        if not self.endpoints_inside():
            raise ValueError("several collectives at once run inside the engine: on its own switches "
                             "(--backend native), not BMv2's")
        net = self.net
        dilation = self.result_fields(net.settings)["dilation"]
        everyone = net.rank_hosts()
        trim = net.settings.trim[1] if net.settings.trim else None
        ranks = [pick(everyone, t.hosts, t.planes) for t in tenants]
        sizes = [whole_chunks([s if isinstance(s, int) else parse_size(s) for s in t.sizes], len(r))
                 for t, r in zip(tenants, ranks, strict=True)]
        algos = [self.resolve(t.op, r, sz, t.algo)[0] for t, r, sz in zip(tenants, ranks, sizes, strict=True)]
        jobs = [job_params(r, t.op, sz, cc=t.cc, seed=t.seed, trim_dscp=trim, spray=t.spray, algo=a)
                for t, r, sz, a in zip(tenants, ranks, sizes, algos, strict=True)]
        net.engine.reset_fidelity()
        results, kernel = run_together_in_engine(net.engine, jobs)
        stats = net.engine.stats()
        out = []
        for t, r, sz, res, a in zip(tenants, ranks, sizes, results, algos, strict=True):
            rate = min(rate for h in r for _, rate in h.ports)
            fidelity = self.verdict(rate_bps=rate, frame_bytes=MTU + HEADERS, kernel_frames=kernel, endpoints=res,
                                    stats=stats)
            out.append({**summarise(t.op, r, sz, res, stats, fidelity, clock=self.clock, dilation=dilation, seed=t.seed,
                                    algo=a), "hosts": [h.name for h in r], "together": len(tenants)})
        return out

    def replay(self, trace: Trace, hosts: Sequence[str] | None = None, *, algo: str | None = None,
               cc: str = "none", seed: int = 0, spray: str = "weighted") -> dict[str, Any]:
        """Execution trace `trace` replayed, rank r on hosts[r] (default: the fabric's hosts in order),
        summarised (emu.collectives.playback)."""
        from emu.collectives import playback
        from emu.collectives.job import ReplayJob
        from emu.collectives.run import MTU, pick
        from emu.roce.transport import HEADERS

        if not self.endpoints_inside():
            raise ValueError("a trace replays inside the engine: on its own switches (--backend native), "
                             "not BMv2's")
        net = self.net
        ranks = pick(net.rank_hosts(), hosts, None)
        trim = net.settings.trim[1] if net.settings.trim else None
        sent = playback.params(ranks, trace, algo=algo, cc=cc, seed=seed, trim_dscp=trim, spray=spray)
        ranks = ranks[:len(trace.ranks)]
        net.engine.reset_fidelity()
        state = net.engine.wait_job(net.engine.start_job(ReplayJob, sent))
        parts = state.get("parts", [state.get("result")])
        results = sorted((r for part in parts for r in part["ranks"]), key=lambda r: r["rank"])
        stats = net.engine.stats()
        fidelity = self.verdict(rate_bps=min(rate for h in ranks for _, rate in h.ports), frame_bytes=MTU + HEADERS,
                                kernel_frames=int(state["kernel_frames"]), stats=stats)
        return {**playback.summarise(trace, ranks, results, stats, fidelity, sent),
                **self.result_fields(net.settings)}

    @abstractmethod
    def collective_results(self, hosts: list[Any], op: str, sizes: list[int], *, cc: str, seed: int,
                           trim_dscp: int | None, spray: str, algo: str | None) -> tuple[list[dict[str, Any]], int]:
        """Every rank's result and the kernels' frames the engine took meanwhile."""

    @abstractmethod
    def verdict(self, *, rate_bps: float = 100e9, frame_bytes: int = 1500, kernel_frames: int = 0,
                senders: list[dict[str, Any]] | None = None, endpoints: list[dict[str, Any]] | None = None,
                stats: dict[str, Any] | None = None) -> dict[str, Any]:
        """The run's fidelity verdict; packet times are one `frame_bytes` frame at `rate_bps`, the fastest
        link its traffic used. `kernel_frames`: what the engine took from the kernels meanwhile;
        `senders`, `endpoints`: the paced UDP senders' and MetaRoCE endpoints' results (their lateness)."""


class Perf:
    """MetaRoCE writers and their server, done: `clients` (one result each), `server`, `kernel_frames` (the
    kernels' frames the engine took meanwhile) and `failed_at_s` (with fail_plane: when, in fabric seconds
    on the clients' traces' clock)."""

    def __init__(self, clients: list[dict[str, Any]], server: dict[str, Any], kernel_frames: int = 0,
                 failed_at_s: float | None = None) -> None:
        self.clients, self.server = clients, server
        self.kernel_frames, self.failed_at_s = kernel_frames, failed_at_s

    @property
    def endpoints(self) -> list[dict[str, Any]]:
        return [*self.clients, self.server]


class FabricTime(Timebase):
    """Fabric time is a clock of its own, advanced by the engine from event to event while the project's
    endpoints run inside it."""

    clock = ClockKind.FABRIC

    @classmethod
    def run_at(cls, dilation: float | str | None, at: Callable[[float], R], auto: Callable[[], R],
               default: float) -> R:
        return at(default if dilation in (None, "auto") else float(dilation))  # type: ignore[arg-type]

    @classmethod
    def admit(cls, name: str, *, engine: bool, kernel: bool) -> None:
        if not engine:
            raise ValueError(f"{name} runs on the wall clock: its traffic is the kernel's or BMv2 carries it "
                             "(--clock wall)")

    @classmethod
    def result_fields(cls, settings: RunSettings) -> dict[str, Any]:
        out: dict[str, Any] = {"clock": cls.clock, "dilation": 1.0}  # fabric time is the engine's own
        if settings.workers > 1:
            out["workers"] = settings.workers  # the fabric split over that many, in windows
        return out

    @classmethod
    def with_speed(cls, fidelity: dict[str, Any], costs: list[dict[str, Any]]) -> None:
        if costs:
            fidelity["speed"] = add_speeds(costs)

    def traffic(self, flows: list[Flow], *, fail_plane: tuple[int, float] | None = None) -> EngineFlows:
        return EngineFlows(self.net, flows, fail_plane=fail_plane)

    def collective_results(self, hosts: list[Any], op: str, sizes: list[int], *, cc: str, seed: int,
                           trim_dscp: int | None, spray: str, algo: str | None,
                           payload: str = "real") -> tuple[list[dict[str, Any]], int]:
        from emu.collectives.run import run_in_engine

        return run_in_engine(self.net.engine, hosts, op, sizes, cc=cc, seed=seed, trim_dscp=trim_dscp, spray=spray,
                             algo=algo, payload=payload)

    def verdict(self, *, rate_bps: float = 100e9, frame_bytes: int = 1500, kernel_frames: int = 0,
                senders: list[dict[str, Any]] | None = None, endpoints: list[dict[str, Any]] | None = None,
                stats: dict[str, Any] | None = None) -> dict[str, Any]:
        return fabric_clock_verdict(packet_s=packet_time_s(rate_bps, frame_bytes), kernel_frames=kernel_frames)


class WallTime(Timebase):
    """Fabric time is wall time / D: the project's endpoints run inside the engine on its wall loop where
    its own switches carry them (`endpoints_inside`), and on BMv2 as processes in the hosts, their
    frames the kernels' and simple_switch's."""

    clock = ClockKind.WALL

    @classmethod
    def run_at(cls, dilation: float | str | None, at: Callable[[float], R], auto: Callable[[], R],
               default: float) -> R:
        return auto() if dilation in (None, "auto") else at(float(dilation))  # type: ignore[arg-type]

    @classmethod
    def admit(cls, name: str, *, engine: bool, kernel: bool) -> None:
        if not kernel:
            raise ValueError(f"{name} measures on the fabric clock only: --clock fabric")

    def traffic(self, flows: list[Flow], *, fail_plane: tuple[int, float] | None = None
                ) -> EngineFlows | KernelFlows:
        """Inside the engine where the endpoints run (emu.traffic.job); else paced processes in the hosts."""
        if self.endpoints_inside():
            return EngineFlows(self.net, flows, fail_plane=fail_plane)
        return KernelFlows(self.net, flows, fail_plane=fail_plane)

    def perf(self, srcs: list[str], dst: str, *, nbytes: int, cc: str = "none", message: int = 1 << 20,
             fail_after: tuple[int, int] | None = None, timeout: float | None = None,
             trim_dscp: int | None = None, spray: str = "weighted") -> Perf:
        """Inside the engine where the endpoints run (`endpoints_inside`); else processes in the hosts, `timeout`
        (wall s) by default PerfRun's, which follows the bytes and D."""
        from emu.roce.run import PerfRun, mininet_popen

        if self.endpoints_inside():
            return super().perf(srcs, dst, nbytes=nbytes, cc=cc, message=message, fail_after=fail_after,
                                trim_dscp=trim_dscp, spray=spray)
        net, failed_at = self.net, None
        run = PerfRun([mininet_popen(net.get(s)) for s in srcs], mininet_popen(net.get(dst)), nbytes=nbytes,
                      dilation=self.dilation, cc=cc, message=message, timeout=timeout, lat_iters=0,
                      trim_dscp=trim_dscp, spray=spray)
        if fail_after is not None:
            net.wait_forwarded(net.host_planes(srcs[0])[fail_after[0]][0], fail_after[1])
            net.fail(plane=fail_after[0])
            failed_at = to_s(run.clock.at_wall(time.monotonic()))  # the endpoints' traces' clock
        try:
            clients, server = run.wait()
        finally:
            if fail_after is not None:
                net.restore(plane=fail_after[0])
        return Perf(clients, server, 0, failed_at)

    def endpoints_inside(self) -> bool:
        """Whether the project's endpoints run inside the engine, on its wall loop, as on the fabric clock
        (the same jobs, compiled where the core is): wherever the engine's own switches carry their
        frames, in one worker or several (each host whole on one, its job's parts agreeing through
        notes), on one machine or several. On BMv2 frames must cross a kernel (simple_switch's), and
        each endpoint is a process in its host."""
        return self.net.settings.backend == "native"

    def collective_results(self, hosts: list[Any], op: str, sizes: list[int], *, cc: str, seed: int,
                           trim_dscp: int | None, spray: str, algo: str | None,
                           payload: str = "real") -> tuple[list[dict[str, Any]], int]:
        from emu.collectives.run import run_in_engine, run_ranks

        if self.endpoints_inside():
            return run_in_engine(self.net.engine, hosts, op, sizes, cc=cc, seed=seed, trim_dscp=trim_dscp,
                                 spray=spray, algo=algo, payload=payload)[0], 0
        if trim_dscp is not None:
            raise ValueError("a collective on a trimming fabric runs inside the engine: on its own switches "
                             "(--backend native), not BMv2's")
        return run_ranks(hosts, op, sizes, dilation=self.dilation, cc=cc, spray=spray, algo=algo), 0

    def verdict(self, *, rate_bps: float = 100e9, frame_bytes: int = 1500, kernel_frames: int = 0,
                senders: list[dict[str, Any]] | None = None, endpoints: list[dict[str, Any]] | None = None,
                stats: dict[str, Any] | None = None) -> dict[str, Any]:
        return fabric_fidelity(stats if stats is not None else self.net.engine.stats(), rate_bps=rate_bps,
                               frame_bytes=frame_bytes, senders=senders, endpoints=endpoints)


TIMEBASES: dict[ClockKind, type[Timebase]] = {tb.clock: tb for tb in (FabricTime, WallTime)}


def clock_label(result: dict[str, Any], *, long: bool = False) -> str:
    """How a plot's title (or, `long`, a table's heading) names the clock a result was measured on, from
    the result alone."""
    if check_clock(result.get("clock", ClockKind.WALL)) is not ClockKind.FABRIC:  # read back, it is a name
        return f"D={result['dilation']:g}"
    return f"the fabric clock (exact; seed {result.get('seed', 0)})" if long else "fabric clock"
