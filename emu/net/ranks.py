"""A distributed job's ranks: one process per host, in the host's namespace (`emu run`, `net.run`).

Each rank gets what a PyTorch or MPI program expects to find (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT, and EMU_HOSTS, the ranks' addresses in order). With `mpi`, Open MPI's own
`mpirun` starts them: it runs in rank 0's host, so that the daemons it starts in the other hosts can
reach it over the fabric (a host's namespace has no way to the root namespace), and it reaches the
hosts through an rsh agent of ours that enters a host's namespace by its shell's pid instead of ssh.

On the wall clock a rank's clocks, sleeps and timeouts can run at fabric speed, 1/D of the wall:
libfaketime, preloaded into the rank (fabric_time_env). The kernel's own timers (TCP's
retransmission timeout, delayed ACKs) and the stamps it puts in packets cannot be: they keep the
wall's (docs/architecture.md, "Fabric time in the hosts' processes").
"""

from __future__ import annotations

import glob
import importlib.util
import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from emu.launch import scratch_dir
from emu.net.cleanup import faketime_leftovers

MASTER_PORT = 29500  # PyTorch's default: every host is a namespace of its own, so it is free
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1", "/usr/lib/*/faketime/libfaketimeMT.so.1",
                 "/usr/local/lib/faketime/libfaketimeMT.so.1")
FAILED_GRACE_S = 1.0  # wall seconds the other ranks have to end on their own once one has failed
# Where a rank says what it wrote: "out" or "err".
LineSink = Callable[[int, str, str], None]


@dataclass(frozen=True)
class RankResult:
    """One rank of a job as it ended: its exit code (negative: killed by that signal), what it wrote."""

    rank: int
    host: str
    code: int
    stdout: str
    stderr: str


class RankFailed(RuntimeError):
    """A rank exited non-zero: the first one that did, in one line; `results` has every rank's."""

    def __init__(self, message: str, code: int, results: list[RankResult]) -> None:
        super().__init__(message)
        self.code = code
        self.results = results


class JobTimeout(TimeoutError):
    """The job ran over its time limit (wall seconds) and every rank was stopped. The message names the
    setting that changes the limit, as the caller spells it: `timeout=5` from Python (net.run), `--timeout
    5` from `emu run` and the Mininet CLI's `run` (said(option))."""

    EXIT_CODE = 124  # what `emu run` exits with, as coreutils' timeout does

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        super().__init__(self.said("timeout="))

    def said(self, option: str) -> str:
        """The one line, naming the limit as `option` spells it ("timeout=" or "--timeout")."""
        python = option.endswith("=")
        setting = f"{option}{self.limit_s:g}" if python else f"{option} {self.limit_s:g}"
        unset = f"{option}None" if python else f"without {option}"
        return (f"the job ran over its time limit, {setting} (wall seconds), and its ranks were stopped: "
                f"a larger {option} gives it longer; {unset} it is waited for")


def faketime_lib() -> str:
    """libfaketime's multithreaded library (Debian's libfaketime), or ValueError saying what to install."""
    for pattern in FAKETIME_LIBS:
        for path in sorted(glob.glob(pattern)):
            if os.path.exists(path):
                return path
    raise ValueError("libfaketime is not installed (apt-get install libfaketime): needed to give the ranks fabric "
                     "time; --no-dilate-time runs them on the wall's")


def dilate_lib() -> str | None:
    """emu/net/dilate.c as set-up built it (what libfaketime leaves undilated: the kernel's stamps on a
    rank's received packets, setitimer), or None where set-up had no C compiler."""
    spec = importlib.util.find_spec("emu.net._dilate")
    return spec.origin if spec is not None and spec.origin and os.path.exists(spec.origin) else None


def fabric_time_env(dilation: float) -> dict[str, str]:
    """The environment that makes a dynamically linked program's clocks (clock_gettime, MONOTONIC too,
    gettimeofday, time) and waits (sleep, nanosleep, poll, select, epoll_wait timeouts) run at 1/D of the
    wall: a fabric second is D wall seconds, as for the fabric's links. Not cached (FAKETIME_NO_CACHE),
    so every read is the wall's now, scaled; the clock starts at the wall's time when the process does.
    After libfaketime, dilate (emu/net/dilate.c): the kernel's stamps on received packets keep the wall's
    clock, so a program that reads them (ping's RTT) takes the time itself instead; setitimer's timer runs
    at fabric time (ping's wait for its last reply)."""
    rate = f"{1.0 / dilation:.12g}"
    preload = ":".join(p for p in (faketime_lib(), dilate_lib()) if p)
    return {"LD_PRELOAD": preload, "FAKETIME": f"+0 x{rate}", "FAKETIME_NO_CACHE": "1"}


def fabric_time_prefix(dilation: float) -> str:
    """fabric_time_env as a shell prefix, for one command of a host's shell: `h.cmd(fabric_time_prefix(D) +
    " ./probe")`. A Mininet host's shell (`cmd`, `sendCmd`) keeps the wall's time by default: Mininet and
    this project drive it with waits in wall seconds (ping's -W in pingall_planes and Mininet's pingAll,
    round_trips, Mininet's `iperf -t`), which fabric time would stretch D times (a lost ping's 2 s wait,
    2000 s at D = 1000). The assignments apply to the first command of the line only, as the shell's do."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in fabric_time_env(dilation).items())


def rank_env(rank: int, addresses: Sequence[str], port: int = MASTER_PORT) -> dict[str, str]:
    """What torchrun gives a rank (one rank per host: LOCAL_RANK 0), and EMU_HOSTS: every rank's address."""
    return {"RANK": str(rank), "WORLD_SIZE": str(len(addresses)), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank), "MASTER_ADDR": addresses[0], "MASTER_PORT": str(port),
            "EMU_HOSTS": ",".join(addresses)}


def exit_code(results: Sequence[RankResult]) -> int:
    """The job's exit code: its first failing rank's (128 + N for a signal N), 0 if every rank's was 0."""
    for r in results:
        if r.code:
            return r.code if r.code > 0 else 128 - r.code
    return 0


def _reader(stream: Any, rank: int, kind: str, into: list[str], sink: LineSink | None) -> threading.Thread:
    def read() -> None:
        for line in stream:
            into.append(line)
            if sink is not None:
                sink(rank, kind, line.rstrip("\n"))
        stream.close()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    """Each still running process and what it started (its session: mnexec -d made it a leader):
    SIGTERM, then SIGKILL a second later."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        live = [p for p in procs if p.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        for p in live:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def _wait_all(procs: list[subprocess.Popen], timeout: float | None) -> int | None:
    """Wait until every process ends or one fails (then the others are stopped, as mpirun does: a job
    whose rank is gone would wait for it forever); the index of the first that failed, or None."""
    deadline = None if timeout is None else time.monotonic() + timeout
    failed = None
    try:
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                if failed is None and p.poll() not in (None, 0):
                    failed = i
            if failed is not None:
                grace = time.monotonic() + FAILED_GRACE_S  # the others may be ending on their own: their codes
                while time.monotonic() < grace and any(p.poll() is None for p in procs):
                    time.sleep(0.02)
                break
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeout(timeout)
            time.sleep(0.02)
    finally:
        _stop(procs)  # nothing of a job outlives it: an exception or a signal on the way out included
    if failed is None:
        failed = next((i for i, p in enumerate(procs) if p.returncode != 0), None)
    return failed


def run_ranks(hosts: Sequence[Any], addresses: Sequence[str], argv: Sequence[str], *, env: dict[str, str] | None = None,
              timeout: float | None = None, sink: LineSink | None = None) -> list[RankResult]:
    """Rank i on Mininet host hosts[i] (whose address is addresses[i]), all started at once, each
    `argv` with its rank's environment and `env` on top of this one. Every rank's result, in rank
    order; RankFailed if one exited non-zero (the others are stopped then)."""
    procs: list[subprocess.Popen] = []
    outs: list[tuple[list[str], list[str]]] = []
    readers: list[threading.Thread] = []
    try:
        for i, h in enumerate(hosts):
            e = dict(os.environ, **rank_env(i, addresses), **(env or {}))
            try:
                p = h.popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=e, text=True, errors="replace")
            except OSError as exc:
                raise ValueError(f"rank {i} on {h.name}: cannot start {argv[0]}: {exc.strerror or exc}") from None
            procs.append(p)
            outs.append(([], []))
            readers += [_reader(p.stdout, i, "out", outs[-1][0], sink), _reader(p.stderr, i, "err", outs[-1][1], sink)]
        failed = _wait_all(procs, timeout)
    finally:
        _stop(procs)
        faketime_leftovers()  # a rank stopped here leaves its clock's shared start in /dev/shm
    for t in readers:
        t.join(5)
    results = [RankResult(i, h.name, p.returncode, "".join(o), "".join(e))
               for i, (h, p, (o, e)) in enumerate(zip(hosts, procs, outs, strict=True))]
    if failed is not None:
        r = results[failed]
        # mnexec says why it could not start the program (on stderr, exit 1): that is the one line's end
        last = r.stderr.strip().splitlines()[-1:] if r.code == 1 else []
        why = last[0] if last and last[0].endswith(("No such file or directory", "Permission denied")) else ""
        raise RankFailed(f"rank {r.rank} on {r.host} {_how(r.code)}" + (f": {why}" if why else ""),
                         exit_code([r]), results)
    return results


def _how(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


# -- Open MPI ---------------------------------------------------------------------------------------

AGENT = """#!/bin/sh
# mpirun's rsh agent for one emu job: `agent HOST COMMAND...` runs COMMAND (one shell line, as ssh
# would) in HOST's network namespace, with HOST as its host name (each host a UTS namespace of its own).
# The daemon's own channel is told that host's subnets (its environment: mpirun's line does not name them).
host=$1; shift
case "$host" in
{cases}
*) echo "emu rsh agent: no host $host in this job" >&2; exit 255;;
esac
OMPI_MCA_oob_tcp_if_include=$nets; export OMPI_MCA_oob_tcp_if_include
exec mnexec -a "$pid" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
"""


def mpi_networks(addresses: Sequence[str]) -> list[str]:
    """One host's fabric subnets (IPv4, "10.0.0.0/24", ...), from its interfaces' addresses: what Open MPI's
    TCP transport and its daemons' channel in that host are told to use. Each host is told its own (interface
    names differ per host), not every rank's: a subnet a host has no interface in is warned about by every
    process of Open MPI there (FPF's leaves each have their own)."""
    nets = {str(ipaddress.ip_interface(a).network) for a in addresses}
    return sorted(nets, key=lambda n: ipaddress.ip_network(n))


def mpirun_argv(hosts: Sequence[tuple[str, int]], argv: Sequence[str], networks: Sequence[Sequence[str]],
                folder: str, env: dict[str, str]) -> list[str]:
    """mpirun's command line for one rank per host: (name, shell pid) each, in rank order, and each host's
    subnets (mpi_networks); the hostfile and the rsh agent written in `folder`; `env` exported to every
    rank (-x). The subnets go to each process in its environment, not as mpirun's --mca (which it hands
    on to every daemon and rank alike): the agent sets the daemons' (oob_tcp_if_include), each rank's
    `sh -c` its own (btl_tcp_if_include, by its rank: one rank per host, in hostfile order), and
    mpirun's own comes from run_mpi's environment."""
    hostfile = os.path.join(folder, "hostfile")
    with open(hostfile, "w") as f:
        f.writelines(f"{name} slots=1 max_slots=1\n" for name, _ in hosts)
    agent = os.path.join(folder, "agent")
    cases = "\n".join(f"{shlex.quote(name)}) pid={pid} nets={','.join(nets)};;"
                      for (name, pid), nets in zip(hosts, networks, strict=True))
    with open(agent, "w") as f:
        f.write(AGENT.format(cases=cases))
    os.chmod(agent, 0o700)
    mca = {"plm_rsh_agent": agent, "plm_rsh_no_tree_spawn": "1", "btl": "tcp,self", "orte_tmpdir_base": folder,
           "pml": "ob1", "btl_tcp_disable_family": "6", "oob_tcp_disable_family": "6",
           # every host is on one machine: a rank waiting on the network yields the core to the engine
           "mpi_yield_when_idle": "1",
           # No RDMA-style put over TCP (Open MPI's default flags less put and hetero-rdma): a long message
           # goes as 128 KiB send fragments, a few in flight. With put, the whole rest of a message is one
           # fragment, and a rank's reply to its peer's rendezvous (the control message that lets the peer
           # send) queues behind it on the same socket: two ranks sending to each other at once then took
           # turns, or overlapped, as the race after a barrier fell, and the same allreduce read 1.10, 1.28
           # or 1.43 fabric ms an iteration from round to round (docs/performance.md, "Jobs in the hosts").
           "btl_tcp_flags": "send,inplace,need-ack,need-csum",
           # A long message's fragments go over at most this many of a host's interfaces at once (ob1's
           # default 4): on 8 planes NetPIPE's 8 MiB took 187 fabric us, 4 planes' worth, at any D; with
           # every plane, 97.8 us (docs/performance.md, "NetPIPE across FPF 8 x 8").
           "pml_ob1_max_send_per_range": str(max(4, *(len(n) for n in networks)))}
    out = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "-np", str(len(hosts)), "--hostfile", hostfile,
           "--map-by", "node", "--tag-output"]
    for k, v in mca.items():
        out += ["--mca", k, v]
    for k, v in env.items():
        out += ["-x", f"{k}={v}"]
    # Each rank learns its rank from Open MPI's variables; torchrun's names are set from them as the rank starts.
    own = " ".join(f"{i}) OMPI_MCA_btl_tcp_if_include={','.join(nets)};;" for i, nets in enumerate(networks))
    torch = (f"case $OMPI_COMM_WORLD_RANK in {own} esac; export OMPI_MCA_btl_tcp_if_include; "
             "RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK "
             "LOCAL_WORLD_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE GROUP_RANK=$OMPI_COMM_WORLD_RANK; "
             "export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK; exec \"$@\"")
    return [*out, *shlex.split(os.environ.get("EMU_MPIRUN_ARGS", "")), "sh", "-c", torch, "sh", *argv]


_TAG = re.compile(r"\[\d+,(\d+)\]<(stdout|stderr)>:")


class TaggedLines:
    """mpirun's --tag-output back into each rank's own lines. mpirun tags what a rank wrote chunk by chunk,
    not line by line: a line written in two writes (NetPIPE's "0: 1048576 bytes 10 times -->", then its
    figures) comes as one line with a second tag inside it, and another rank's chunk can come between
    the two. Each piece goes to its rank's stream (stdout or stderr, as its tag says) and waits there
    until a piece ends its line (the last piece of one of mpirun's lines does)."""

    def __init__(self, n: int, emit: LineSink) -> None:
        self.n, self.emit = n, emit
        self.partial: dict[tuple[int, str], str] = {}
        self.lock = threading.Lock()  # mpirun's stdout and stderr each have a reader thread

    def feed(self, line: str) -> bool:
        """One line of mpirun's output, its newline stripped; False if it is mpirun's own (not tagged)."""
        parts = _TAG.split(line)  # text before the first tag, then (rank, stream, text) for each tag
        if parts[0] or len(parts) == 1 or any(int(r) >= self.n for r in parts[1::3]):
            return False
        pieces = [(int(parts[i]), "out" if parts[i + 1] == "stdout" else "err", parts[i + 2])
                  for i in range(1, len(parts), 3)]
        with self.lock:
            for j, (r, k, text) in enumerate(pieces):
                so_far = self.partial.pop((r, k), "") + text
                if j < len(pieces) - 1:
                    self.partial[(r, k)] = so_far
                else:
                    self.emit(r, k, so_far)
        return True

    def close(self) -> None:
        """The pieces of lines no newline ended (a rank's last write): each as a line."""
        with self.lock:  # a reader that outlived its join may still feed
            for (r, k), text in sorted(self.partial.items()):
                self.emit(r, k, text)
            self.partial.clear()
_FAILED = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")


def run_mpi(hosts: Sequence[Any], addresses: Sequence[str], planes: Sequence[Sequence[str]], argv: Sequence[str], *,
            env: dict[str, str] | None = None, timeout: float | None = None,
            sink: LineSink | None = None) -> list[RankResult]:
    """The job through Open MPI's mpirun, started in rank 0's host: its lines sorted to their ranks
    (--tag-output), each rank's exit code as mpirun reports it (the failed rank's, the others 0 or
    mpirun's own code). `planes`: each rank's interface addresses with their prefix lengths."""
    if shutil.which("mpirun") is None:
        raise ValueError("mpirun not found: apt-get install openmpi-bin libopenmpi-dev (make setup installs them)")
    folder = scratch_dir("mpi")
    n = len(hosts)
    outs: list[tuple[list[str], list[str]]] = [([], []) for _ in range(n)]
    own: list[str] = []  # mpirun's own lines (its errors), not a rank's

    def to_rank(r: int, k: str, text: str) -> None:
        outs[r][0 if k == "out" else 1].append(text + "\n")
        if sink is not None:
            sink(r, k, text)

    tagged = TaggedLines(n, to_rank)

    def route(_rank: int, kind: str, line: str) -> None:
        if tagged.feed(line):
            return
        own.append(line + "\n")
        if sink is not None and line.strip():
            sink(-1, kind, line)

    try:
        job_env = dict(env or {})
        job_env.update({"EMU_HOSTS": ",".join(addresses), "MASTER_ADDR": addresses[0], "MASTER_PORT": str(MASTER_PORT)})
        nets = [mpi_networks(p) for p in planes]
        cmd = mpirun_argv([(h.name, h.pid) for h in hosts], argv, nets, folder, job_env)
        clean_env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "FAKETIME"))
                     and k != "LD_PRELOAD"}  # mpirun and its daemons keep the wall's time
        clean_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", HOME=folder,
                         OMPI_MCA_oob_tcp_if_include=",".join(nets[0]))  # mpirun's own channel, in rank 0's host
        try:
            p = hosts[0].popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               env=clean_env, text=True, errors="replace")
        except OSError as exc:
            raise ValueError(f"cannot start mpirun in {hosts[0].name}: {exc.strerror or exc}") from None
        readers = [_reader(p.stdout, 0, "out", [], route), _reader(p.stderr, 0, "err", [], route)]
        try:
            _wait_all([p], timeout)
        finally:
            _stop([p])
            for t in readers:
                t.join(5)
            tagged.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        faketime_leftovers()
    said = "".join(own)
    codes = [0] * n
    failed = [(int(r), int(c)) for r, c in _FAILED.findall(said) if int(r) < n]
    failed += [(int(r), -int(sig)) for r, sig in _SIGNALLED.findall(said) if int(r) < n]
    for r, c in failed:
        codes[r] = c
    if p.returncode and not failed:
        codes = [p.returncode] * n  # mpirun failed before or besides any rank: each rank's is unknown
    results = [RankResult(i, h.name, codes[i], "".join(o), "".join(e))
               for i, (h, (o, e)) in enumerate(zip(hosts, outs, strict=True))]
    if p.returncode:
        if failed:
            r = results[failed[0][0]]
            raise RankFailed(f"rank {r.rank} on {r.host} {_how(r.code)}", exit_code([r]), results)
        last = [ln for ln in own if ln.strip()]
        raise RankFailed(f"mpirun in {hosts[0].name} {_how(p.returncode)}"
                         + (f": {last[-1].strip()}" if last else ""), exit_code([results[0]]), results)
    return results
