"""`emu run TOPO ... -np N -- PROG ARGS`: a distributed job on a fabric built for it, then torn down.

The fabric is built as `emu up` builds it (same topology and run options), on the wall clock: the
hosts' kernels carry the job's traffic. Each rank's lines are printed as they come, tagged
`[rank I] ` (stdout to stdout, stderr to stderr, as mpirun --tag-output does); the exit code is the
first failing rank's; a job stopped at its --timeout exits 124 (as coreutils' timeout does), its line
naming --timeout and the value it had.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parser is built on every `emu` command: the fabric's modules load where they run
    from emu.net.fabric import FabricNet
    from emu.net.switch import RunSettings

_PRINTING = threading.Lock()  # every rank's output has a reader thread: one whole line at a time


def print_line(rank: int, kind: str, line: str) -> None:
    """A rank's line, tagged with its rank; mpirun's own lines (rank -1) tagged [mpirun], on stderr."""
    tag = "[mpirun]" if rank < 0 else f"[rank {rank}]"
    out = sys.stdout if kind == "out" and rank >= 0 else sys.stderr
    with _PRINTING:
        out.write(f"{tag} {line}\n")
        out.flush()


def wall_seconds(text: str) -> float:
    """--timeout: wall seconds, a finite number > 0 (a limit of 0 would stop every job at once)."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wall seconds, a number > 0, e.g. 600; got {text!r}") from None
    if not 0 < s < float("inf"):
        raise argparse.ArgumentTypeError(f"wall seconds, a number > 0, e.g. 600; got {text!r}")
    return s


def job_options(p: argparse.ArgumentParser) -> None:
    """The options of a job, the same for `emu run` and the Mininet CLI's `run`."""
    p.add_argument("-np", "--np", dest="np", type=int, default=None,
                   help="ranks, one per host: the first N hosts (default every host, or every host of --hosts)")
    p.add_argument("--hosts", help="the hosts in rank order, comma-separated (default the fabric's, in order)")
    p.add_argument("--mpi", action="store_true",
                   help="start the ranks with Open MPI's mpirun (in rank 0's host; its rsh agent enters the hosts' "
                        "namespaces, no ssh; TCP transport over the hosts' fabric interfaces)")
    p.add_argument("--mpi-planes", metavar="P[,P...]",
                   help="with --mpi: only these planes' interfaces carry the job (default every plane)")
    p.add_argument("--no-dilate-time", action="store_true",
                   help="the ranks' clocks and sleeps keep the wall's time (default: fabric time, 1/D of the wall, "
                        "through libfaketime)")
    p.add_argument("--timeout", type=wall_seconds, default=None,
                   help="wall seconds before the job is stopped, exit code 124 (default none: it is waited for)")


def mpi_planes(args: argparse.Namespace) -> list[int] | None:
    """--mpi-planes 0,2 -> [0, 2]; None if not given."""
    if not args.mpi_planes:
        return None
    try:
        return [int(p) for p in args.mpi_planes.split(",")]
    except ValueError:
        raise ValueError(f"--mpi-planes takes plane numbers, e.g. 0 or 0,1; got {args.mpi_planes!r}") from None


def run_job(topology: str, params: dict[str, str], settings: RunSettings, args: argparse.Namespace,
            command: list[str]) -> int:
    """Build the fabric, run the job, tear down (a signal included); the job's exit code."""
    from mininet.log import setLogLevel

    from emu.net.fabric import FabricNet
    from emu.net.ranks import JobTimeout, RankFailed, exit_code
    from emu.topo import make_topo

    if not settings.clock.paced:
        raise ValueError("emu run keeps the wall clock: the hosts' kernels carry the job's traffic")
    if settings.machines:
        raise ValueError("emu run runs on one machine: --machines is for up, scenario and bench")
    topo = make_topo(topology, params)  # validated: nothing exists yet if this fails
    hosts = [h.strip() for h in args.hosts.split(",")] if args.hosts else None
    known = topo.hosts()
    missing = [h for h in hosts or [] if h not in known]
    if missing:
        raise ValueError(f"no host {missing[0]!r} in {topology}; hosts: {', '.join(known)}")
    setLogLevel("warning")
    with FabricNet(topo, settings=settings) as net:
        try:
            results = net.run(command, np=args.np, hosts=hosts, mpi=args.mpi, planes=mpi_planes(args),
                              dilate_time=not args.no_dilate_time, timeout=args.timeout, sink=print_line)
        except RankFailed as exc:
            say_fidelity(net)  # it cannot raise: the job's own error stays the last line
            print(f"emu run: {exc}", file=sys.stderr, flush=True)
            return exc.code
        except JobTimeout as exc:  # named as this command's option, not the API's timeout=
            say_fidelity(net)
            print(f"emu run: {exc.said('--timeout')}", file=sys.stderr, flush=True)
            return JobTimeout.EXIT_CODE
        say_fidelity(net)
    return exit_code(results)


def say_fidelity(net: FabricNet) -> None:
    """The fabric's fidelity verdict over the job (and the build before it), the last line on stderr: whether
    the engine kept every packet on time at this D, so that the job's own figures are the fabric's (a D
    whose verdict is not ok gives figures partly the emulator's: a larger --dilation). Before it, when the
    ranks' kernels' TCP waited on a timer, a line that says so (emu.net.kerneltcp): the verdict is the
    engine's alone."""
    from emu.fidelity import fabric_fidelity, line
    from emu.net.kerneltcp import said as tcp_said

    tcp = tcp_said(net.job_tcp_timers, net.settings.dilation)
    if tcp:  # the hosts' kernels are not in the verdict: what their wall-time timers did is said beside it
        print(f"emu run: {tcp}", file=sys.stderr, flush=True)
    try:
        said = line(fabric_fidelity(net.engine.stats()))
    except Exception as exc:  # noqa: BLE001 (an engine that failed is said, not raised over the job's own code)
        said = f"fidelity: unknown, the engine did not report ({exc})"
    print(f"emu run: {said}", file=sys.stderr, flush=True)
