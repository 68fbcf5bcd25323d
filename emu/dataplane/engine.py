"""The engine as its user sees it: start workers, talk to them, stop them.

Each worker is a separate process (so the fabric uses every core) with its
own log file and control socket under the run directory. A worker that dies
is reported by name with the last lines of its log; stop() leaves no
process, socket or directory behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from emu.dataplane.channel import common_offset
from emu.dataplane.job import Job
from emu.dataplane.protocol import (
    Connect,
    Degrade,
    JobResult,
    Ping,
    Probe,
    ProbeResult,
    QueueSamples,
    Request,
    ResetFidelity,
    RunJob,
    SampleQueues,
    SetHeadroom,
    SetPace,
    SetPort,
    SetTables,
    StartJob,
    Stats,
    encode,
)
from emu.dataplane.spec import EngineSpec
from emu.dataplane.worker import control_path
from emu.fidelity import add_speeds
from emu.launch import (
    LOCAL_MACHINES,
    RUN_ROOT,
    Supervisor,
    address_towards,
    child_env,
    machine_address,
    owner,
    peak_rss,
    private_dir,
    proc_stat,
    python_module,
    recorded_deaths,
    remote_module,
    say_death,
    ssh_base,
)
from emu.simtime import PS_PER_S, to_s

FAILED_LOGS = "/var/log/emu"  # outside RUN_ROOT, which `emu clean` empties; EMU_LOG_DIR puts it elsewhere


def failed_logs() -> str:
    """Where a failed start's worker logs are kept: EMU_LOG_DIR (the tests' own folder), else FAILED_LOGS."""
    return os.environ.get("EMU_LOG_DIR") or FAILED_LOGS
WORKER_MODULE = "emu.dataplane.worker"


# Who is told how a running job advances: watch(job, its fabric time now, or None once it is done), at each
# poll of wait_job. The command line's progress display (emu.cli.progress) is one; the engine knows no more.
JOB_WATCHERS: list[Callable[[int, float | None], None]] = []


def huge_pages(spec: EngineSpec) -> dict[str, str]:
    """The environment that asks glibc's malloc for transparent huge pages (glibc.malloc.hugetlb=1, read by
    glibc 2.35 and later, ignored before), for a fabric-clock worker started here (a remote one's command
    line sets its own environment). At thousands of links its state is hundreds of megabytes read at random,
    and with 4 KiB pages a first read of an object can miss the TLB as well as the cache: 7 % less CPU a hop
    at FPF 512 x 8 with them (docs/performance.md). Not on the wall clock, where the fault that makes a huge
    page may compact memory for milliseconds and make a paced worker late."""
    if spec.clock.paced:
        return {}
    have = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in have:
        return {}  # the user's choice
    return {"GLIBC_TUNABLES": f"{have}:glibc.malloc.hugetlb=1" if have else "glibc.malloc.hugetlb=1"}


class EngineError(RuntimeError):
    """The engine could not start or a worker died; the message says which and why."""


def new_run_dir() -> str:
    private_dir(RUN_ROOT)
    path = os.path.join(RUN_ROOT, f"run-{os.getpid()}-{int(time.time() * 1000) % 10**8}")
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)  # whatever the umask: its sockets take commands as root
    with open(os.path.join(path, "created.json"), "w") as f:  # owned from the start (emu.net.cleanup)
        json.dump({"owner": owner(), "interfaces": [], "pids": [], "netns": [], "hosts": {}}, f)
    return path


class Engine:
    def __init__(self, spec: EngineSpec, *, owns_run_dir: bool = True) -> None:
        """`owns_run_dir`: whether stopping removes the run directory (False when a FabricNet made it
        and recorded the fabric there: it removes it once the links are gone)."""
        self.spec = spec
        self.run_dir = spec.run_dir
        self.owns_run_dir = owns_run_dir
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        self.on_death = say_death  # how a worker's death is reported, the moment it happens
        self.supervisor: Supervisor | None = None
        # Called before a job starts (the fabric's controller settling): see start_job.
        self.before_job: Callable[[], None] | None = None
        self.speeds: list[dict[str, Any]] = []  # what each job that ended cost (speed())

    def log_path(self, index: int) -> str:
        return os.path.join(self.run_dir, f"worker-{index}.log")

    # Wall seconds a worker may take to open each port (a packet socket, its ring mapped): measured
    # about 10 ms on this machine; the start timeout scales with the busiest worker's ports.
    START_S_PER_PORT = 0.05

    def start(self, timeout: float | None = None) -> None:
        """Start the workers and wait for each to answer; the default timeout is 20 s plus
        START_S_PER_PORT for each port of the busiest worker."""
        if timeout is None:
            ports = [sum(len(s.ports) for s in self.spec.switches if s.worker == i) for i in range(self.spec.workers)]
            timeout = 20.0 + self.START_S_PER_PORT * max(ports, default=0)
        os.makedirs(self.run_dir, exist_ok=True)
        if self.spec.pcap_dir:
            os.makedirs(self.spec.pcap_dir, exist_ok=True)
        try:
            if self.remote:
                self.spec = replace(self.spec, hosts=self._channel_hosts())
            if self.spec.paced:  # fabric time 0 at one instant for every worker's pacer
                self.spec = replace(self.spec, origin=time.monotonic() + common_offset(bool(self.spec.machines)))
            spec_path = os.path.join(self.run_dir, "engine.json")
            with open(spec_path, "w") as f:
                f.write(self.spec.to_json())
            for i in range(self.spec.workers):
                self._launch(i, spec_path)
            deadline = time.monotonic() + timeout
            for i in range(self.spec.workers):
                while True:
                    self._check_alive(i)
                    try:
                        if self._exchange(i, Ping(), timeout=1.0).get("ok"):
                            break
                    except (OSError, ValueError):  # not listening yet
                        pass
                    if time.monotonic() > deadline:
                        stage = self._tail(i, 1) or "nothing logged: still reading its spec or building switches"
                        raise EngineError(f"engine worker {i} did not answer within {timeout:.0f}s (last: {stage}); "
                                          f"log: {os.path.join(failed_logs(), os.path.basename(self.run_dir))}")
                    time.sleep(0.02)
            if self.spec.channelled:
                self._connect(deadline)
            self.supervisor = Supervisor(self.run_dir, lambda m: self.on_death(m))
            for i, proc in enumerate(self.procs):
                names = [sw.name for sw in self.spec.switches if sw.worker == i]
                self.supervisor.watch(proc, f"engine worker {self.spec.worker_name(i)} (switches "
                                            f"{', '.join(names) or 'none'}; log {self.log_path(i)})")
        except BaseException:
            self.stop(keep_logs=True)
            self._keep_logs_elsewhere()
            raise

    def machine(self, i: int) -> str:
        """The machine worker i runs on ("localhost": this one)."""
        return self.spec.machines[i] if self.spec.machines else "localhost"

    @property
    def remote(self) -> bool:
        return any(m not in LOCAL_MACHINES for m in self.spec.machines)

    def _channel_hosts(self) -> tuple[str, ...]:
        """Where each worker listens for its peers: a remote machine's address as ssh reaches it, and ours
        on the way there."""
        far = {m: machine_address(m) for m in self.spec.machines if m not in LOCAL_MACHINES}
        here = address_towards(next(iter(far.values())))
        return tuple(far.get(m, here) for m in self.spec.machines)

    def _launch(self, i: int, spec_path: str) -> None:
        """Worker i: a child of ours here; on another machine, over ssh (as Mininet's cluster edition
        reaches its servers), with its spec on stdin, its control socket forwarded to the path ours would
        have here, and its life tied to the ssh session (stdin's end is its owner's)."""
        log = open(self.log_path(i), "w")  # noqa: SIM115 (the child owns it)
        self.logs.append(self.log_path(i))
        try:
            machine = self.machine(i)
            if machine in LOCAL_MACHINES:
                # The workers import exactly what this process can (mn --custom runs outside the venv).
                self.procs.append(subprocess.Popen(
                    python_module(WORKER_MODULE, spec_path, str(i), str(os.getpid())),
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=child_env(PYTHONUNBUFFERED="1", **huge_pages(self.spec)), start_new_session=True))
                return
            # Its own run directory there, named in its command line (`emu clean` there knows it by that).
            there = replace(self.spec, run_dir=f"{self.run_dir}-w{i}")
            forward = ("-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes",
                       "-L", f"{control_path(self.run_dir, i)}:{control_path(there.run_dir, i)}")
            proc = subprocess.Popen(
                remote_module(machine, WORKER_MODULE, os.path.join(there.run_dir, "engine.json"), str(i), "-",
                              options=forward),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, start_new_session=True)
            self.procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(there.to_json().encode() + b"\n")
            proc.stdin.flush()  # and kept open: the worker ends when it closes
        finally:
            log.close()

    @property
    def split(self) -> bool:
        """A fabric over several workers, joined by channels (emu.dataplane.channel): a job runs a part on each."""
        return self.spec.channelled

    def _connect(self, deadline: float) -> None:
        """Each worker connects its channels to the others' addresses; wait until every one has all its peers."""
        n = self.spec.workers
        peers = [self._exchange(i, Ping(), timeout=5.0)["channel"] for i in range(n)]
        for i in range(n):
            r = self.request(i, Connect(peers), timeout=15.0)
            if not r.get("ok"):
                raise EngineError(f"engine worker {self.spec.worker_name(i)} could not connect its channels: "
                                  f"{r.get('error')}")
        for i in range(n):
            while self._exchange(i, Ping(), timeout=5.0)["peers"] < n - 1:
                self._check_alive(i)
                if time.monotonic() > deadline:
                    raise EngineError(f"engine worker {self.spec.worker_name(i)} did not get channels to every "
                                      f"other worker (log: {self.log_path(i)})")
                time.sleep(0.01)

    def _keep_logs_elsewhere(self) -> None:
        """A failed start leaves no run directory; its worker logs move to FAILED_LOGS for reading."""
        dest = private_dir(os.path.join(private_dir(failed_logs()), os.path.basename(self.run_dir)))
        for path in self.logs:
            if os.path.exists(path):
                shutil.move(path, os.path.join(dest, os.path.basename(path)))
        if self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _tail(self, i: int, lines: int = 6) -> str:
        try:
            with open(self.log_path(i)) as f:
                return "".join(f.readlines()[-lines:]).strip()
        except OSError:
            return "(no log)"

    def _log_where(self, i: int) -> str:
        """Where worker i's log is now: in the run directory while it exists, else kept in FAILED_LOGS."""
        if os.path.exists(self.log_path(i)):
            return self.log_path(i)
        return os.path.join(failed_logs(), os.path.basename(self.run_dir), os.path.basename(self.log_path(i)))

    def _check_alive(self, i: int) -> None:
        """Raise if worker i has died. Workers die together (a worker whose peer's channel breaks exits),
        so the error names the cause first: a worker killed by a signal, else i."""
        if self.procs[i].poll() is None:
            return
        dead = [j for j, p in enumerate(self.procs) if p.poll() is not None]
        first = next((j for j in dead if self.procs[j].returncode < 0), i)
        rc = self.procs[first].returncode
        how = f"exited with code {rc}" + (f" (killed by signal {-rc})" if rc < 0 else "")
        also = [f"engine worker {self.spec.worker_name(j)} (code {self.procs[j].returncode})" for j in dead if j != first]
        raise EngineError(f"engine worker {self.spec.worker_name(first)} {how}: {self._tail(first)}\n"
                          + (f"then exited: {', '.join(also)}\n" if also else "")
                          + f"(full log: {self._log_where(first)})")

    def check(self) -> None:
        """Raise if any worker has died, naming it and its last error."""
        for i in range(len(self.procs)):
            self._check_alive(i)

    def request(self, index: int, msg: Request, timeout: float | None = 5.0) -> dict[str, Any]:
        """Worker `index`'s answer to `msg`; EngineError naming the worker (and its log) if it is dead
        or does not answer, never a bare socket error. `timeout` None: for as long as the worker lives (a
        request whose work grows with the fabric, such as building a job of 32 768 ranks, has no fixed
        bound that holds on every machine and size)."""
        try:
            return self._exchange(index, msg, timeout)
        except (OSError, ValueError) as exc:
            if index < len(self.procs):
                # A killed worker's socket closes before its exit status can be read: give it a moment.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.procs[index].wait(timeout=2.0)
                self._check_alive(index)  # dead: say so, with its exit code and log
            dead = [d for d in recorded_deaths(self.run_dir) if d.startswith(f"engine worker {index} ")]
            if dead:  # another process's run: its supervisor wrote down what died
                raise EngineError(dead[-1]) from None
            raise EngineError(f"engine worker {index} did not answer {type(msg).__name__} ({exc}); "
                              f"log: {self._log_where(index)}") from None

    def _exchange(self, index: int, msg: Request, timeout: float | None) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5.0 if timeout is None else timeout)
            s.connect(control_path(self.run_dir, index))
            s.sendall(encode(msg))
            if timeout is None:
                s.settimeout(1.0)
            chunks: list[bytes] = []
            while not chunks or not chunks[-1].endswith(b"\n"):
                try:
                    chunk = s.recv(1 << 20)
                except TimeoutError:
                    if timeout is not None or index >= len(self.procs):  # not ours to watch: no waiting on
                        raise
                    self._check_alive(index)  # still working on it: wait on, unless it died
                    continue
                if not chunk:
                    break
                chunks.append(chunk)
        return json.loads(b"".join(chunks))

    def stats(self) -> dict[str, Any]:
        """Counters of every switch, and each worker's fidelity, in one dict."""
        self.check()
        out: dict[str, Any] = {"dilation": self.spec.dilation, "switches": {}, "workers": []}
        ends: dict[str, dict[str, Any]] = {}  # a cut host cable's NIC, counted where its host runs
        if self.spec.channelled:
            out["lookahead_s"] = to_s(self.spec.lookahead_ps())  # the window the workers advance in together
        for i in range(self.spec.workers):
            r = self.request(i, Stats(), timeout=None)  # every port's counters: work that grows with the fabric
            out["switches"].update(r["switches"])
            ends.update(r.get("host_ends", {}))
            out["workers"].append({"worker": i, "fidelity": r["fidelity"], "fabric_now_s": r["fabric_now_s"],
                                   "jobs": r.get("jobs", []),
                                   **({"machine": self.machine(i)} if self.spec.machines else {}),
                                   **({"channel": r["channel"]} if "channel" in r else {})})
        for name, nic in ends.items():  # its drops on the port, as a NIC the switch holds counts them
            switch, port = name.split("/", 1)
            p = out["switches"][switch]["ports"][port]
            for reason, n in nic.pop("drops").items():
                p["drops"][reason] = p["drops"].get(reason, 0) + n
            p["host_nic"] = nic
        return out

    def worker_of(self, switch: str) -> int:
        for s in self.spec.switches:
            if s.name == switch:
                return s.worker
        raise EngineError(f"no switch named {switch!r}")

    def set_port(self, switch: str, port: str, up: bool) -> None:
        for i in self._port_workers(switch, port):
            self._ask(switch, SetPort(switch, port, up), worker=i)

    def degrade(self, switch: str, port: str, *, loss: float = 0.0, rate_bps: float = 0.0, delay_s: float = 0.0,
                seed: int = 0) -> None:
        """A port's link degraded (Degrade; fabric units); all zero restores it."""
        if not 0.0 <= loss < 1.0 or rate_bps < 0 or delay_s < 0:
            raise ValueError(f"degrade: loss must be in [0, 1), rate and delay >= 0; got {loss}, {rate_bps}, {delay_s}")
        for i in self._port_workers(switch, port):
            self._ask(switch, Degrade(switch, port, loss, rate_bps, delay_s, seed), worker=i)

    def _port_workers(self, switch: str, port: str) -> list[int]:
        """The workers that run a part of port (switch, port): its switch's, and its host's where the
        host runs on another (PortSpec.host_worker: the cable is cut, its NIC runs with the host)."""
        w = self.worker_of(switch)
        s = next(s for s in self.spec.switches if s.name == switch)
        hw = next((p.host_worker for p in s.ports if p.ifname == port), -1)
        return [w] if hw in (-1, w) else [w, hw]

    def set_pace(self, wall_s: float) -> None:
        """Fabric clock: a job's fabric second takes at least `wall_s` wall seconds (0: no limit), to be
        watched; results do not change. The wall clock's pace is D, set at start."""
        if self.spec.paced:
            raise ValueError("pace is for the fabric clock; on the wall clock, D (--dilation) is the pace")
        if not 0.0 <= wall_s <= 1e6:
            raise ValueError(f"pace: wall seconds per fabric second in [0, 1e6], got {wall_s}")
        for i in range(self.spec.workers):
            r = self.request(i, SetPace(float(wall_s)))
            if not r.get("ok"):
                raise EngineError(f"pace: {r.get('error', 'request refused')}")

    def _ask(self, switch: str, msg: Request, timeout: float = 5.0, worker: int = -1) -> dict[str, Any]:
        r = self.request(self.worker_of(switch) if worker < 0 else worker, msg, timeout=timeout)
        if not r.get("ok"):
            raise EngineError(f"{switch}: {r.get('error', 'request refused')}")
        return r

    def set_tables(self, switch: str, tables: dict[str, Any]) -> None:
        self._ask(switch, SetTables(switch, tables))

    def set_headroom(self, switch: str, port: str, nbytes: int) -> None:
        self._ask(switch, SetHeadroom(switch, port, nbytes))

    def probe_rtts(self, switch: str, port: str, count: int = 5, timeout: float = 10.0) -> list[float]:
        """Round trips of `count` probes across one link, in fabric seconds. `timeout` (wall s) is
        what the wait allows beyond the probes' own time at this D: their spacing and four times the
        cable's round trip (at D = 1e6 a 2 km cable's is 20 s of wall time)."""
        # Wall seconds a fabric second takes now: D on the wall clock; on the fabric clock, with no job
        # running, the D its idle time follows (a 1 ms spacing there would be 1 ms of fabric time, 10 s
        # of wall at D = 10 000).
        wall_d = self.spec.dilation if self.spec.paced else self.spec.idle_dilation
        spacing = max(0.001 / wall_d, 1e-6)  # fabric s: at least 1 ms of wall, and 1 us of fabric
        delay = next((p.delay_s for s in self.spec.switches if s.name == switch for p in s.ports if p.ifname == port), 0.0)
        timeout += (count * spacing + 4 * 2 * delay) * wall_d
        pid = self._ask(switch, Probe(switch, port, count, spacing))["probe"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rtts = self._ask(switch, ProbeResult(switch, pid))["rtts_s"]
            if len(rtts) >= count:
                return rtts
            time.sleep(0.01)
        raise EngineError(f"{switch}/{port}: probes did not come back within {timeout:.0f}s (is the peer a switch?)")

    samples_ports = True  # sample_queues and port_samples (a BMv2 plane has neither)

    def sample_queues(self, ports: list[tuple[str, str]], interval_fabric_s: float) -> None:
        """Start sampling the total bytes queued on these (switch, port) egress ports."""
        by_worker: dict[int, list[tuple[str, str]]] = {}
        for sw, port in ports:
            by_worker.setdefault(self.worker_of(sw), []).append((sw, port))
        for w, mine in by_worker.items():
            r = self.request(w, SampleQueues([list(p) for p in mine], interval_fabric_s))
            if not r.get("ok"):
                raise EngineError(r.get("error", "sampling refused"))

    def queue_samples(self) -> dict[str, list[tuple[float, int]]]:
        """Per port: (fabric seconds, bytes queued): on the fabric clock its own time, on the wall clock since the
        worker started."""
        return {name: [(t, q) for t, q, _ in samples] for name, samples in self.port_samples().items()}

    def port_samples(self) -> dict[str, list[tuple[float, int, float]]]:
        """Per port: (fabric seconds, bytes queued, fabric seconds paused so far): what sends through the port
        (its transmitter, and a host port's NIC) held by PFC, summed over priorities, cumulative. The times
        are on the clock the engine's flows report theirs (`first_s`): the fabric clock's own, or the wall's
        monotonic seconds / D."""
        out: dict[str, list[tuple[float, int, float]]] = {}
        for w in range(self.spec.workers):
            r = self.request(w, QueueSamples(), timeout=30)
            at = r.get("origin_s", 0.0)
            for i, name in enumerate(r.get("ports", [])):
                out[name] = [(at + t, q[i], p[i]) for (t, q), (_, p) in zip(r["samples"], r["paused"], strict=True)]
        return out

    def reset_fidelity(self) -> None:
        """Every worker starts a new lateness window: what follows is the measurement, set-up is not judged."""
        self.check()
        for i in range(self.spec.workers):
            self.request(i, ResetFidelity())

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the workers have used so far: what a benchmark divides by its work."""
        ticks = os.sysconf("SC_CLK_TCK")
        return sum(max(0, proc_stat(p.pid, 11)) + max(0, proc_stat(p.pid, 12)) for p in self.procs) / ticks

    def peak_rss_bytes(self) -> int:
        """The most memory each worker has held at once (VmHWM), summed: what a large fabric costs."""
        return sum(peak_rss(p.pid) for p in self.procs)

    def start_job(self, kind: type[Job], params: dict[str, Any]) -> int:
        """Start a job of ours inside the engine (a Job subclass), a part on each worker; its id. `before_job`
        runs first: a control plane keeps its timers on the wall clock, so an update still pending when
        a job starts would land at a fabric time that depends on the machine's speed (a plane restored
        just before a write was still unrouted during it, and its packets looped)."""
        if self.before_job is not None:
            self.before_job()
        if not self.split:
            r = self.request(0, RunJob(kind.kind(), params), timeout=None)
            if not r.get("ok"):
                raise EngineError(f"the engine refused the {kind.__name__}: {r.get('error')}")
            return int(r["job"])
        # Split: every worker builds its part (however long that takes), then all start at one instant.
        ids = set()
        for i in range(self.spec.workers):
            r = self.request(i, RunJob(kind.kind(), params, hold=True), timeout=None)
            if not r.get("ok"):
                raise EngineError(f"engine worker {self.spec.worker_name(i)} refused the {kind.__name__}: {r.get('error')}"
                                  + ("" if i == 0 else "; the parts already built cannot run without it: "
                                     "stop this fabric"))
            ids.add(int(r["job"]))
        if len(ids) != 1:
            raise EngineError(f"the workers numbered the {kind.__name__} differently ({sorted(ids)}): stop this fabric")
        job = ids.pop()
        at, wall_at = self._common_start()
        for i in range(self.spec.workers):
            r = self.request(i, StartJob(job, at, wall_at), timeout=60)
            if not r.get("ok"):
                raise EngineError(f"engine worker {self.spec.worker_name(i)} could not start its part of the "
                                  f"{kind.__name__}: {r.get('error')}; stop this fabric")
        return job

    # Wall seconds from asking the workers of a wall-clock fabric to start a job's built parts to their start:
    # time for every request to arrive, on this machine's control sockets or ssh's (milliseconds each).
    WALL_START_S = 0.05

    def _common_start(self) -> tuple[int, float]:
        """The instant every part of a split job starts at (StartJob.at): the next whole second at least half a
        second of fabric time after the furthest worker's now (its time between jobs follows the wall, so
        the requests arrive well before it). Paced, also the wall instant the start maps to (wall_at):
        WALL_START_S from now on the workers' common clock (emu.dataplane.channel.common_offset; a part
        asked after that starts late, and its lateness counts in the verdict); else -1."""
        now = max(int(self.request(i, Ping())["now_ps"]) for i in range(self.spec.workers))
        wall_at = time.monotonic() + common_offset(bool(self.spec.machines)) + self.WALL_START_S if self.spec.paced else -1.0
        return ((now + PS_PER_S // 2) // PS_PER_S + 1) * PS_PER_S, wall_at

    def job_state(self, job: int) -> dict[str, Any]:
        """{"done": False, "fabric_s": ...} while it runs; then {"done": True, "result": ...}; EngineError
        with the job's reason if it failed. Split over workers, done once every part is, with each
        part's result in `parts` (worker order) and the kernel's frames summed."""
        states = []
        for i in range(self.spec.workers if self.split else 1):
            r = self.request(i, JobResult(job), timeout=60)
            if not r.get("ok"):
                where = f" (engine worker {self.spec.worker_name(i)})" if self.split else ""
                raise EngineError(f"job {job}{where}: {r.get('error')}")
            states.append(r)
        if len(states) == 1:
            return states[0]
        if not all(s["done"] for s in states):
            return {"ok": True, "done": False, "fabric_s": min(s.get("fabric_s", math.inf) for s in states)}
        return {"ok": True, "done": True, "parts": [s["result"] for s in states],
                "kernel_frames": sum(int(s.get("kernel_frames", 0)) for s in states),
                "speed": add_speeds([s["speed"] for s in states], parallel=True)}

    # Wall seconds fabric time may stand still during a job before it is given up: the worker's loop
    # answers between batches of events, so a live job advances between two looks whatever the load.
    JOB_STALL_S = 120.0

    def wait_job(self, job: int, merge: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
                 poll_s: float = 0.02) -> dict[str, Any]:
        """Wait for a job to end: its final state (`result`, `kernel_frames`). EngineError if it failed,
        or if its fabric time stood still for JOB_STALL_S of wall time (a stuck worker, never a slow one).
        Split over workers, `merge` (the job kind's, Job.merge) joins the parts into `result`."""
        fabric_s, moved = -1.0, time.monotonic()
        watch = JOB_WATCHERS[-1] if JOB_WATCHERS else None
        while True:
            state = self.job_state(job)
            if watch is not None:
                watch(job, None if state["done"] else state["fabric_s"])
            if state["done"]:
                if "parts" in state and merge is not None:
                    state["result"] = merge(state["parts"])
                self.speeds.append(state["speed"])
                return state
            if state["fabric_s"] > fabric_s:
                fabric_s, moved = state["fabric_s"], time.monotonic()
            elif time.monotonic() - moved > self.JOB_STALL_S:
                raise EngineError(f"job {job}: the engine's fabric time stood at {fabric_s * 1e6:.1f} us for "
                                  f"{self.JOB_STALL_S:.0f} s of wall time: its worker is stuck (log: "
                                  f"{self._log_where(0)})")
            time.sleep(poll_s)

    def speed(self, since: int = 0) -> dict[str, Any]:
        """What the jobs this engine ran (from the `since`-th on) cost: packet-hops, wall and CPU seconds,
        hops per wall second and ns of CPU per hop, and the core that ran them."""
        return add_speeds(self.speeds[since:])

    @property
    def deaths(self) -> list[str]:
        """Every worker death seen so far, one line each."""
        return list(self.supervisor.deaths) if self.supervisor else []

    def stop(self, keep_logs: bool = False) -> None:
        if self.supervisor is not None:  # what follows is asked for, not a death
            self.supervisor.stop()
            self.supervisor = None
        for p in self.procs:
            if p.stdin is not None:  # a remote worker: its stdin's end stops it, then its ssh ends
                try:
                    p.stdin.close()
                except OSError:
                    pass
        for p in self.procs:
            if p.stdin is not None:
                try:
                    p.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    pass
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for i, p in enumerate(self.procs):
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:  # a stop it did not take (a bug of ours): said, not hidden
                print(f"emu: engine worker {self.spec.worker_name(i)} did not stop within 3 s of SIGTERM: killed",
                      file=sys.stderr, flush=True)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for i, p in enumerate(self.procs):
            if p.stdin is not None:  # its run directory there, which a worker killed there leaves behind
                subprocess.run([*ssh_base(), self.machine(i), f"rm -rf {shlex.quote(self.run_dir)}-w{i}"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=15, check=False)
        self.procs = []
        if not keep_logs and self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
