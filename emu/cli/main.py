"""`emu`: bring fabrics up, run scenarios and benchmarks, inspect, clean up."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from rich.console import Console

from emu import use_stdlib_distutils
from emu.clock import CLOCKS, ClockKind, check_clock
from emu.collectives import OPS
from emu.collectives.algorithms import ALGOS, AUTO, DESCRIBED

err = Console(stderr=True, soft_wrap=True)  # an error is one line, whatever the width


def _topo_params(extra: list[str]) -> dict[str, str]:
    """`--gpus 8 --planes 2` (or --gpus=8) after the topology name become topology parameters."""
    params: dict[str, str] = {}
    it = iter(extra)
    for tok in it:
        if not tok.startswith("--"):
            raise SystemExit(f"emu: unexpected argument {tok!r}; topology parameters look like --gpus 8")
        key, eq, value = tok[2:].partition("=")
        if not eq:
            value = next(it, None)
            if value is None:
                raise SystemExit(f"emu: --{key} needs a value")
        params[key] = value
    return params


def _settings(args: argparse.Namespace):
    """Run settings from the options; a BMv2 run is checked for its tools before anything is built."""
    from emu.control.runtime import ControlTiming
    from emu.net.switch import RunSettings
    from emu.units import parse_time

    timing = ControlTiming(detection_s=parse_time(args.detection), hold_down_s=parse_time(args.hold_down))
    ecn = None
    if args.ecn:
        parts = args.ecn.split(",")
        if len(parts) != 3:
            raise ValueError("--ecn needs KMIN,KMAX,PMAX, e.g. 20KB,200KB,0.2")
        from emu.units import parse_size

        try:
            pmax = float(parts[2])
        except ValueError:
            raise ValueError(f"--ecn: PMAX is a probability in (0, 1], got {parts[2]!r}") from None
        ecn = (parse_size(parts[0]), parse_size(parts[1]), pmax)
    trim = _trim(args.trim)
    d = _dilation(args, auto=args.command == "scenario")  # "auto" is decided per run, by run_scenario
    settings = RunSettings(dilation=d if isinstance(d, float) else 1000.0, pfc=not args.no_pfc, spray=args.spray,
                           workers=args.workers, pcap_dir=args.pcap or "", control=timing,
                           measured_headroom=args.measured_headroom, ecn=ecn, backend=args.backend,
                           links=args.links, clock=_clock(args), trim=trim, pace=args.pace,
                           machines=_machines(args.machines), core=args.core or "",
                           kernel=_kernel(args, _clock(args)), p4=getattr(args, "p4", None) or "",
                           p4_tables=getattr(args, "p4_tables", None) or "", host_cc=args.host_cc)
    _check_backend(settings)
    return settings


def _machines(text: str | None) -> tuple[str, ...]:
    """--machines HOST[,HOST...]: the machines (ssh names; localhost is this one) a fabric runs on."""
    names = tuple(m.strip() for m in (text or "").split(",") if m.strip())
    if text is not None and not names:
        raise ValueError("--machines needs HOST[,HOST...], e.g. m1,m2 (ssh names; localhost is this machine)")
    return names


def _trim(text: str | None) -> tuple[int, int] | None:
    """--trim SIZE[,DSCP]: (bytes kept after the Ethernet header, the trimmed packets' DSCP; 11 if not given)."""
    if not text:
        return None
    parts = text.split(",")
    try:
        if len(parts) > 2:
            raise ValueError
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 11
    except ValueError:
        raise ValueError(f"--trim needs SIZE[,DSCP] in bytes and a DSCP, e.g. 64,11; got {text!r}") from None


def _kernel(args: argparse.Namespace, clock: ClockKind) -> bool:
    """Whether the hosts get kernels: asked for (--kernel), or needed (the wall clock, BMv2, several machines,
    `up` and its commands); a scenario's, benchmark's or replay's fabric-clock run, whose traffic is all the
    engine's, builds without them (nothing in the kernel to make: a fabric of hundreds of GPUs in seconds)."""
    if getattr(args, "kernel", False) or clock.paced or args.command not in ("scenario", "bench", "replay"):
        return True
    return bool(getattr(args, "backend", "native") != "native" or getattr(args, "machines", None))


def _clock(args: argparse.Namespace) -> ClockKind:
    """--clock, else the fabric clock for a scenario that runs all its traffic inside the engine (with the
    native engine), else the wall clock; over machines, the fabric clock unless the scenario is the
    wall clock's (its clocks then must agree: docs/cluster.md)."""
    if args.clock:
        return check_clock(args.clock)
    if args.command == "scenario" and args.backend == "native":
        from emu.scenarios import scenario_class

        try:
            return ClockKind.FABRIC if scenario_class(args.name).fabric_clock else ClockKind.WALL
        except ValueError:
            return ClockKind.WALL  # an unknown name is said where the scenario is looked up
    if getattr(args, "machines", None):
        return ClockKind.FABRIC  # a fabric over machines keeps one fabric time across them
    return ClockKind.WALL


def _check_backend(settings: Any) -> None:
    """Whatever the backend can know wrong (tools, link modes) is said before anything is built."""
    from emu.net.backend import backend

    backend(settings.backend).check(settings, [])


def dilation_arg(text: str) -> float | str:
    """--dilation: a finite number > 0, or "auto" (benches that calibrate it)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        d = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, got {text!r}") from None
    if not (d > 0 and d != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0 (wall time = fabric time x D), got {text!r}")
    return d


def _dilation(args: argparse.Namespace, *, auto: bool) -> float | str | None:
    """The option, else EMU_DILATION, checked the same way; "auto" only where `auto` is supported."""
    d = args.dilation
    if d is None and os.environ.get("EMU_DILATION"):
        try:
            d = dilation_arg(os.environ["EMU_DILATION"])
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"EMU_DILATION: {exc}") from None
    if d == "auto" and not auto:
        raise ValueError(f"--dilation auto is for `emu scenario` and `emu bench collective`; `emu {args.command}` "
                         "takes a number")
    return d


def _need_root() -> None:
    if os.geteuid() != 0:
        raise SystemExit("emu: this command builds namespaces and veth pairs: run it as root (sudo)")


def cmd_up(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.cli.up import up

    _need_root()
    return up(args.topology, _topo_params(extra), _settings(args), test=args.test, as_json=args.json, web=args.web,
              record=args.record,
              web_control=args.web_control)


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.cli.runjob import run_job

    _need_root()
    if not args.program:
        raise ValueError("give the program after --, e.g. emu run fpf --gpus 4 -np 4 -- ./a.out")
    return run_job(args.topology, _topo_params(extra), _settings(args), args, args.program)


def cmd_doctor(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.cli.doctor import doctor

    report = doctor()
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:8s} {'yes' if v else 'NO'}")
    return 0


def cmd_clean(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.net.cleanup import clean

    _need_root()
    r = clean()
    if not args.quiet:
        if r.empty():
            print("emu clean: nothing to remove")
        else:
            print(f"emu clean: removed {len(r.processes)} processes, {len(r.interfaces)} interfaces, "
                  f"{len(r.namespaces)} namespaces, {len(r.run_dirs)} run directories, {len(r.files)} logs")
        if r.live_runs:
            print(f"emu clean: left {len(r.live_runs)} running fabric(s) alone: {', '.join(r.live_runs)}")
    return _clean_machines(_machines(args.machines), args.quiet)


def _clean_machines(machines: tuple[str, ...], quiet: bool) -> int:
    """`emu clean` on each other machine, over ssh (what a fabric that ran there may have left)."""
    import subprocess

    from emu.launch import LOCAL_MACHINES, remote_module

    code = 0
    for m in machines:
        if m in LOCAL_MACHINES:
            continue
        try:
            r = subprocess.run(remote_module(m, "emu.cli.main", "clean", *(["--quiet"] if quiet else [])),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            r = subprocess.CompletedProcess([], 124, "", "timed out after 120 s")
        for line in (r.stdout + r.stderr).splitlines():
            print(f"{m}: {line}")
        if r.returncode != 0:
            err.print(f"emu clean: on {m} it failed (exit {r.returncode})")
            code = 1
    return code


def cmd_stats(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.cli.live import running_stats
    from emu.cli.render import print_stats

    stats = running_stats()
    if stats is None:
        err.print("emu stats: no running fabric found under /run/emu")
        return 1
    if args.json:
        print(json.dumps(stats))
    else:
        print_stats(stats)
    return 0


def cmd_web(args: argparse.Namespace, extra: list[str]) -> int:
    """Serve the live view of a fabric another process runs, until it stops (or Ctrl-C)."""
    import time

    from emu.cli.live import running_view, still_running
    from emu.cli.up import web_address
    from emu.web.app import WebView, make_app
    from emu.web.scene import Topology

    _need_root()  # the engine's control sockets are root's
    host, port = web_address(args.address)
    engine, record = running_view()
    topo = Topology.from_json(record["topology"])
    view = WebView(lambda token: make_app(topo, engine.stats, token, clock=record["clock"]), host=host, port=port)
    try:
        print(f"live view of {engine.run_dir} (read-only; --web-control is `emu up`'s): {view.url}", flush=True)
        while still_running(engine):
            time.sleep(0.5)
        err.print("emu web: the fabric stopped")
        return 0
    finally:
        view.close()


def cmd_view(args: argparse.Namespace, extra: list[str]) -> int:
    """Serve the replay page of a saved result until Ctrl-C."""
    import threading

    from emu.cli.up import web_address
    from emu.web.app import WebView, make_replay_app

    host, port = web_address(args.web)
    try:
        with open(args.result) as f:
            result = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{args.result}: no such file (scenarios write results/NAME.json)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{args.result}: not a JSON result ({exc})") from None
    if not isinstance(result, dict):
        raise ValueError(f"{args.result}: not a result (a JSON object)")
    view = WebView(lambda token: make_replay_app(result, os.path.basename(args.result), token), host=host, port=port)
    try:
        print(f"replay of {args.result}: {view.url}", flush=True)
        threading.Event().wait()  # until Ctrl-C or SIGTERM
        return 0
    finally:
        view.close()


def cmd_scenario(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.scenarios import run_scenario

    _need_root()
    d = _dilation(args, auto=True)
    result = run_scenario(args.name, _topo_params(extra), _settings(args), out_dir=args.out,
                          dilation="auto" if d is None else d, plot=not args.no_plot)
    from emu.scenarios import scenario_class

    _emit(result, args.json, scenario_class(args.name).headline)
    return _fidelity_exit(result, args.strict, 0 if result.get("passed", True) else 1)


def cmd_replay(args: argparse.Namespace, extra: list[str]) -> int:
    """A Chakra trace on a fabric built for it: the summary, JSON and a timeline."""
    from emu import fidelity
    from emu.collectives.playback import plot
    from emu.collectives.trace import read
    from emu.net.fabric import FabricNet
    from emu.net.switch import RunSettings
    from emu.net.timebase import clock_label
    from emu.topo import make_topo

    _need_root()
    groups = None
    if args.groups:
        try:
            with open(args.groups) as f:
                groups = json.load(f)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--groups {args.groups}: {getattr(exc, 'strerror', None) or exc}") from None
        if not isinstance(groups, dict):
            raise ValueError(f"--groups {args.groups}: a JSON object of process group names to lists of ranks")
    trace = read(args.trace, groups)  # a bad trace is refused before anything is built
    topo = make_topo(args.topo, _topo_params(extra))
    hosts = args.hosts.split(",") if args.hosts else None
    clock = check_clock(args.clock)
    settings = RunSettings(clock=clock, kernel=_kernel(args, clock), core=args.core or "",
                           dilation=float(args.dilation))
    with FabricNet(topo, settings=settings) as net:
        result = net.replay(trace, hosts=hosts, algo=args.algo, seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    name = os.path.basename(os.path.normpath(args.trace)) or "trace"
    with open(os.path.join(args.out, f"replay-{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    if not args.no_plot:
        plot(result, os.path.join(args.out, f"replay-{name}.png"))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{trace.path}: {result['nranks']} ranks on {args.topo}, step {result['step_time_us']:.2f} us "
              f"({clock_label(result)}), exposed communication up to {result['exposed_comm_us']:.2f} us, "
              f"#wrong {result['wrong']}")
        for c in result["collectives"]:
            on = f" on ranks {', '.join(map(str, c['ranks']))}" if "ranks" in c else ""
            print(f"  collective {c['index']}: {c['op']} of {c['size']} B{on} at {c['start_us']:.2f} us, "
                  f"{c['time_us']:.2f} us, its first rank waited {c['waited_us']:.2f} us for its last")
        print(f"  {args.out}/replay-{name}.json" + ("" if args.no_plot else " and .png"))
    print(fidelity.line(result["fidelity"]), file=sys.stderr)  # one line on stderr, as a scenario's or bench's
    return 0 if result["wrong"] == 0 else 1


def cmd_bench(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.bench import run_bench

    _need_root()
    params = _topo_params(extra)
    if args.name not in ("collective", "engine") and args.backend != "native":
        raise ValueError(f"`emu bench {args.name}` measures the native engine; --backend is for `collective` "
                         "and `engine`")
    if args.name == "engine" and args.links != "auto":
        raise ValueError("`emu bench engine` compares the engine with a bridge; --links is for `link` and `collective`")
    if args.name == "link" and args.links != "auto":
        params["links"] = args.links
    settings = None
    if args.name == "engine" and args.backend == "bmv2":
        from emu.backends.bmv2.switch import Bmv2Process
        from emu.net.switch import RunSettings

        Bmv2Process("check", [], 9190).check()
        settings = RunSettings(backend="bmv2")
    if args.name == "collective":
        from emu.net.switch import RunSettings

        clock = check_clock(args.clock) if args.clock else \
            (ClockKind.FABRIC if args.backend == "native" or args.machines else ClockKind.WALL)
        settings = RunSettings(backend=args.backend, links=args.links, clock=clock, trim=_trim(args.trim),
                               pfc=not args.trim, workers=args.workers,  # a trimmed class is lossy: no PFC to count
                               machines=_machines(args.machines), core=args.core or "", kernel=_kernel(args, clock))
        _check_backend(settings)
    if args.reset:
        if args.name != "calibrate":
            raise ValueError("--reset is for `emu bench calibrate`")
        params["reset"] = "1"
    if (args.workers or args.machines) and args.name != "collective":
        raise ValueError(f"--workers and --machines are for `emu bench collective`, not `emu bench {args.name}`")
    if args.algo and args.name != "collective":
        raise ValueError(f"--algo is for `emu bench collective`, not `emu bench {args.name}`")
    if args.algo:
        params["algo"] = args.algo
    if args.payload and args.name != "collective":
        raise ValueError(f"--payload is for `emu bench collective`, not `emu bench {args.name}`")
    if args.payload:
        params["payload"] = args.payload
    if args.core and args.name != "collective":
        raise ValueError(f"--core is for `emu bench collective`, not `emu bench {args.name}`")
    if args.clock and args.name != "collective":
        raise ValueError(f"--clock is for `emu bench collective`; `emu bench {args.name}` measures on the wall clock")
    result = run_bench(args.name, params, dilation=_dilation(args, auto=args.name == "collective"),
                       op=args.op or "", settings=settings)
    code = 0 if result.get("wrong", 0) == 0 and result.get("passed", True) else 1
    tabled = args.name in ("collective", "setup") and not args.json
    if tabled:
        from importlib import import_module

        print(import_module(f"emu.bench.{args.name}").table(result))
    else:
        _emit(result, args.json)
    # calibrate and sync measure the machine, not a fabric: they have no verdict to print.
    return _fidelity_exit(result, args.strict, code,
                          printed=(tabled and args.name == "collective") or args.name in ("calibrate", "sync"))


def cmd_roce(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.cli.live import running_engines, running_hosts
    from emu.roce.run import PerfRun, pid_popen
    from emu.units import parse_size

    _need_root()
    hosts = running_hosts()
    engines = running_engines()
    if not hosts or not engines:
        raise RuntimeError("no running fabric found: start one with `emu up ...` in another terminal")
    for h in (args.src, args.dst):
        if h not in hosts:
            raise ValueError(f"no host {h!r} in the running fabric; hosts: {', '.join(sorted(hosts))}")
    dilation = engines[-1].spec.dilation
    client, server = PerfRun(pid_popen(hosts[args.src]), pid_popen(hosts[args.dst]), nbytes=parse_size(args.bytes),
                             dilation=dilation, cc=args.cc, lat_iters=args.lat_iters).wait()
    result = {"src": args.src, "dst": args.dst, "dilation": dilation, "data_ok": server["data_ok"],
              "bytes": client["bytes"], "bw_fabric_Gbps": client["bw_fabric_bps"] / 1e9,
              "lat_fabric_us": {k: v * 1e6 for k, v in client["lat_fabric_s"].items()},
              "retransmits": client["retransmits"], "planes": client["planes"]}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"MetaRoCE write {args.src} -> {args.dst}: {result['bytes']} B at {result['bw_fabric_Gbps']:.1f} Gb/s, "
              f"latency min/typ/max {', '.join(f'{v:.2f}' for v in result['lat_fabric_us'].values())} us "
              f"(fabric, D={dilation:g}); data {'ok' if result['data_ok'] else 'WRONG'}")
        for p in client["planes"]:
            print(f"  plane {p['plane']}: {p['tx_bytes']} B, {p['retransmits']} retransmits, "
                  f"{'healthy' if p['healthy'] else 'DOWN'}")
    return 0 if server["data_ok"] else 1


def _fidelity_exit(result: dict[str, Any], strict: bool, code: int, printed: bool = False) -> int:
    """Print the fidelity verdict in one line (stderr, so --json output stays one object); with
    --strict, a result whose fidelity is not ok, or was not measured, fails."""
    from emu.fidelity import line

    fid = result.get("fidelity")
    if not printed:
        err.print(line(fid), style=None if fid and fid["ok"] else "yellow", highlight=False, markup=False)
    if strict and not (fid and fid["ok"]):
        err.print("[red]--strict: the result's fidelity is not ok[/red]")
        return code or 3
    return code


def _emit(result: dict[str, Any], as_json: bool, headline: tuple[str, ...] = ()) -> None:
    if as_json:
        print(json.dumps(result))
        return
    from emu.cli.render import print_result

    print_result(result, headline=headline)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dilation", type=dilation_arg, default=None,
                   help="wall time = fabric time x D, or auto (default: EMU_DILATION, else 1000 for `up`, a 100G "
                        "link at 100 Mb/s; auto for scenarios: the smallest D this machine keeps on time)")
    p.add_argument("--clock", choices=CLOCKS, default=None,
                   help="fabric: fabric time is the engine's own (the switches in one worker, or --workers split at "
                        "the longest links; the project's endpoints inside them: exact on any machine; the default of scenarios whose traffic is all "
                        "the project's); wall: fabric time = wall time / D (kernel traffic, BMv2; the default of "
                        "`up` and the other scenarios)")
    p.add_argument("--pace", type=float, default=0.0, metavar="WALL_S",
                   help="with --clock fabric: a fabric second of our traffic takes at least WALL_S wall seconds "
                        "(1000: a fabric millisecond a second), to watch it in the live view; figures do not change")
    p.add_argument("--no-pfc", action="store_true", help="turn PFC off in the lossless class")
    p.add_argument("--spray", action="store_true", help="per-packet spraying instead of ECMP flow hashing")
    p.add_argument("--kernel", action="store_true",
                   help="build the hosts' kernels (a namespace and veths each) on the fabric clock too; without it a "
                        "fabric-clock run, whose traffic is all the engine's, builds none")
    p.add_argument("--host-cc", default="reno", metavar="NAME",
                   help="the hosts' kernels' TCP congestion control (default reno, whose window moves on ACKs and "
                        "losses; bbr's and cubic's own clocks keep wall time, as the kernel's timers do)")
    p.add_argument("--core", choices=("native", "python"), default=None,
                   help="what runs the hot path: native, the compiled core (the default where `make setup` built it), or "
                        "python, the reference it is checked against; the same figures bit for bit")
    p.add_argument("--workers", type=int, default=0,
                   help="engine worker processes (default one, holding the whole fabric); N > 1 splits the fabric "
                        "at its longest links, else by planes, each host whole on one worker, the workers joined by "
                        "channels (on the fabric clock kept in step by windows); the project's endpoints run "
                        "inside the workers on either clock (native engine)")
    p.add_argument("--machines", metavar="HOST[,HOST...]",
                   help="run the fabric over these machines (ssh names as your ssh configuration knows them, or "
                        "EMU_SSH_CONFIG's; localhost: this one), one engine worker each, split at its longest "
                        "links, else by planes; --clock fabric unless --clock wall is given, whose machines' "
                        "clocks must agree (PTP; the verdict counts the bound measured) (docs/cluster.md)")
    p.add_argument("--pcap", metavar="DIR", help="write a pcap per engine-carried port into DIR")
    p.add_argument("--detection", default="50us", help="control plane: failure detection delay (fabric time)")
    p.add_argument("--hold-down", default="0us", help="control plane: damping hold-down between route updates")
    p.add_argument("--backend", choices=("native", "bmv2"), default="native",
                   help="switch data plane: the native engine, or BMv2 simple_switch running p4/fabric.p4")
    p.add_argument("--links", choices=("auto", "netem", "engine"), default="auto",
                   help="with --backend bmv2, what carries the links' rate and delay: tc netem, or the native "
                        "engine as wires (any kernel); auto: netem where the kernel has it")
    p.add_argument("--ecn", help="RED marking in classes 0 and 3: KMIN,KMAX,PMAX (default 100KB,400KB,0.2)")
    p.add_argument("--trim", metavar="SIZE[,DSCP]",
                   help="packet trimming: a MetaRoCE data packet the buffer would drop is cut to SIZE bytes after "
                        "its Ethernet header (48..1500, e.g. 64) and sent ahead as DSCP (default 11); its class "
                        "is then lossy (no PFC) and the receiver NACKs it at once")
    p.add_argument("--measured-headroom", action="store_true",
                   help="size every switch link's PFC headroom from probe round trips at start")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--strict", action="store_true",
                   help="exit non-zero (3) when the result's fidelity is not ok or was not measured")


def cmd_topologies(args: argparse.Namespace, extra: list[str]) -> int:
    from emu.topo import TOPOLOGIES, describe

    names = [args.name] if args.name else sorted(TOPOLOGIES)
    if args.name and args.name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {args.name!r}; known: {', '.join(sorted(TOPOLOGIES))}")
    out = [describe(n) for n in names]
    if args.json:
        print(json.dumps(out))
        return 0
    for d in out:
        print(f"{d['name']}: {d['shape']}")
        for p in d["parameters"]:
            default = "from the preset" if p["default"] is None else repr(p["default"])
            print(f"    {p['option']:22} {p['type']:4} default {default}")
    return 0


def cmd_lab(args: argparse.Namespace, extra: list[str]) -> int:
    from emu import labs

    if args.action == "list":
        if args.json:
            print(json.dumps([{"name": n, "title": labs.title(n), "clocks": list(labs.clocks(n))}
                              for n in labs.lab_names()], indent=2))
        else:
            for name in labs.lab_names():
                print(f"{name:14} {labs.title(name)} [{', '.join(labs.clocks(name))}]")
        return 0
    if not args.name:
        raise ValueError(f"emu lab {args.action} needs a lab name; labs: {', '.join(labs.lab_names())}")
    if args.action == "start":
        where = labs.start(args.name, args.dir)
        print(f"Copied the starter of {args.name} to {where}/. Edit it there, then: "
              f"sudo .venv/bin/emu lab check {args.name}{'' if args.dir is None else ' --dir ' + args.dir}\n")
        print(labs.first_step(args.name))
        return 0

    def show(r: labs.StepResult) -> None:
        if not args.json:
            mark = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
            Console(soft_wrap=True).print(f"{mark}  {r.step} ({r.seconds:.1f} s): {r.detail}", markup=True, highlight=False)

    result = labs.check(args.name, solution=args.solution, work_dir=args.dir, clock=args.clock, seed=args.seed,
                        progress=show)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        if result["steps"] and not result["steps"][0]["passed"] and result["steps"][0]["step"] == "import":
            show(labs.StepResult(**result["steps"][0]))
        if not result["passed"]:
            print(f"(the same check again: --seed {result['seed']})")
    return 0 if result["passed"] else 1


def _topology_help(p: argparse.ArgumentParser, name: str) -> None:
    """`emu up NAME --help`: the topology's own parameters, their types and defaults, in the help."""
    from emu.topo import TOPOLOGIES, describe

    if name not in TOPOLOGIES:
        return
    d = describe(name)
    g = p.add_argument_group(f"{name} parameters", f"{d['shape']} {d['summary']}")
    presets = any(prm["option"] == "--preset" for prm in d["parameters"])
    for prm in d["parameters"]:
        default = prm["default"]
        said = "from --preset" if default is None and presets else "none" if default in (None, "") else default
        g.add_argument(prm["option"], metavar=prm["type"].upper(), help=f"default: {said}")


def _scenario_help(p: argparse.ArgumentParser, name: str) -> None:
    """`emu scenario NAME --help`: the scenario's own parameters, their types and defaults."""
    import dataclasses

    from emu.scenarios import SCENARIOS, scenario_class

    if name not in SCENARIOS:
        return
    cls = scenario_class(name)
    doc = " ".join((cls.__doc__ or "").split())
    g = p.add_argument_group(f"{name} parameters", doc)
    for f in dataclasses.fields(cls):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "str")
        g.add_argument("--" + f.name.replace("_", "-"), metavar=kind.upper(), help=f"default: {f.default}")


def parser(topology: str = "", scenario: str = "") -> argparse.ArgumentParser:
    """`topology`, `scenario`: for `emu up TOPOLOGY --help` and `emu scenario NAME --help`, their own
    parameters are listed too."""
    ap = argparse.ArgumentParser(prog="emu", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="build a fabric and open the Mininet CLI (or run --test headless)",
                       epilog="Each topology's parameters: `emu up TOPOLOGY --help` or `emu topologies`.")
    p.add_argument("topology")
    p.add_argument("--test", choices=("none", "pingall"), help="headless: build, test, tear down")
    p.add_argument("--p4", metavar="PROG.p4",
                   help="with --backend bmv2: every switch runs this P4 program (v1model) instead of p4/fabric.p4, "
                        "compiled with p4c-bm2-ss into the run's own folder (docs/p4.md, \"Your own program\")")
    p.add_argument("--p4-tables", metavar="HOOK.py",
                   help="with --p4: a Python file defining tables(switch) -> list of simple_switch_CLI commands, "
                        "called once per switch with the topology's facts")
    p.add_argument("--web", metavar="[ADDR:]PORT", help="serve the live view (127.0.0.1 unless ADDR; the URL has a token)")
    p.add_argument("--web-control", action="store_true",
                   help="the live view may fail and restore planes, links and switches (default: read-only)")
    p.add_argument("--record", metavar="FILE",
                   help="record the live view's snapshots (four a second) until the fabric stops, into FILE (JSON), "
                        "for `emu view FILE` to replay: the same drawing and panels, with a slider")
    _run_options(p)
    if topology:
        _topology_help(p, topology)
    p.set_defaults(fn=cmd_up)
    p = sub.add_parser("run", help="a distributed job: one process per host of a fabric built for it (-np N -- PROG)",
                       usage="emu run TOPOLOGY [topology and run options] [-np N] [--hosts H1,H2] [--mpi] "
                             "[--no-dilate-time] -- PROG [ARGS...]",
                       epilog="Each rank gets RANK, WORLD_SIZE, LOCAL_RANK (0), MASTER_ADDR, MASTER_PORT and EMU_HOSTS; "
                              "its lines are printed tagged [rank I]; the exit code is the first failing rank's. "
                              "On the wall clock only (the hosts' kernels carry the job).")
    p.add_argument("topology")
    from emu.cli.runjob import job_options

    job_options(p)
    _run_options(p)
    if topology:
        _topology_help(p, topology)
    p.set_defaults(fn=cmd_run, program=[])
    p = sub.add_parser("doctor", help="what this machine offers the emulator")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_doctor)
    p = sub.add_parser("clean", help="remove every namespace, interface and process a run left")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--machines", metavar="HOST[,HOST...]", help="and on these machines, over ssh")
    p.set_defaults(fn=cmd_clean)
    p = sub.add_parser("stats", help="counters of the running fabric")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_stats)
    p = sub.add_parser("web", help="serve the live view of the running fabric (another process's) until it stops")
    p.add_argument("address", nargs="?", default="0", metavar="[ADDR:]PORT",
                   help="where to listen (default 0: a free port on 127.0.0.1; the URL printed has the token)")
    p.set_defaults(fn=cmd_web)
    p = sub.add_parser("replay", help="replay a Chakra execution trace on a fabric: step time, each collective's "
                                      "time, exposed communication",
                       epilog="TRACE is the PREFIX of PREFIX.0.et, PREFIX.1.et, ... (Chakra's converter and generator "
                              "write these) or a folder holding one trace's files. Topology parameters follow "
                              "(--gpus 8 --planes 8).")
    p.add_argument("trace", metavar="TRACE")
    p.add_argument("--topo", default="fpf", help="the fabric to build (default fpf)")
    p.add_argument("--hosts", help="rank r on the r-th of these hosts, comma-separated (default: the hosts in order)")
    p.add_argument("--groups", metavar="FILE",
                   help="JSON {\"PG_NAME\": [rank, ...], ...}: the ranks of each process group the trace's "
                        "collectives name (a trace names its groups, not their members)")
    p.add_argument("--algo", choices=ALGOS, default=None, help="for the collectives that run it (default: each op's)")
    p.add_argument("--core", choices=("native", "python"), default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clock", choices=CLOCKS, default="fabric",
                   help="fabric (exact, the default) or wall: the same ranks inside the engine at --dilation, beside "
                        "the hosts' kernels")
    p.add_argument("--dilation", type=float, default=20000.0, help="wall clock: wall seconds a fabric second takes")
    p.add_argument("--out", default="results", help="folder for the JSON and the timeline (default results/)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_replay)
    p = sub.add_parser("view", help="replay a saved result (results/NAME.json) in the browser: its series and counters")
    p.add_argument("result", metavar="FILE")
    p.add_argument("--web", default="0", metavar="[ADDR:]PORT",
                   help="where to listen (default 0: a free port on 127.0.0.1; the URL printed has the token)")
    p.set_defaults(fn=cmd_view)
    p = sub.add_parser("scenario", help="run one experiment; JSON result and a PNG plot",
                       epilog="Scenarios: incast, plane-down, srv6-te, fpf-vs-nsf, headroom, wcmp, dcqcn, "
                              "roce-plane-down, bag-collective, trimming, congestion-spreading, degraded-plane, "
                              "replica-exclusion, tenants, distance-cliff. Each one's "
                              "parameters: `emu scenario NAME --help`.")
    p.add_argument("name")
    p.add_argument("--out", default="results", help="folder for the JSON and plot (default results/)")
    p.add_argument("--no-plot", action="store_true", help="write the JSON result only")
    _run_options(p)
    if scenario:
        _scenario_help(p, scenario)
    p.set_defaults(fn=cmd_scenario)
    p = sub.add_parser("roce", help="MetaRoCE tools on a running fabric")
    p.add_argument("tool", choices=("perf",))
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--bytes", default="16MiB")
    p.add_argument("--cc", default="none", choices=("none", "dcqcn"))
    p.add_argument("--lat-iters", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_roce)
    p = sub.add_parser("bench", help="measure the engine against the kernel")
    p.add_argument("name", choices=("engine", "link", "collective", "roce", "setup", "soak", "sync", "cut", "calibrate"),
                   help="cut: --topo bag --parts 2 --size 4MiB (what a split over machines would carry between them); soak: --cycles N --kills K --fuzz FRAMES --incasts M --seed S (reliability, not speed); "
                        "setup: --topo fpf,tahan,tahan-next --repetitions N (bring-up and tear-down against "
                        "plain Mininet)")
    p.add_argument("op", nargs="?", help=f"for `collective`: {', '.join(OPS)}")
    p.add_argument("--algo", choices=(*ALGOS, AUTO), default=None,
                   help="for `collective`: " + "; ".join(f"{a}: {d}" for a, d in DESCRIBED.items())
                        + "; auto: the one a cost model of this fabric's paths (lengths, rates) predicts fastest, "
                          "and why (default: ring, direct for alltoall)")
    p.add_argument("--payload", choices=("auto", "real", "none"), default=None,
                   help="for `collective`: real (every byte moved, every result checked), none (headers only, as "
                        "htsim: each byte's delivery exactly once is checked, not its value; the ranks' memory is "
                        "never touched) or auto, the default (real while the ranks' memory fits 4 GiB); the "
                        "result says which ran and what was checked")
    p.add_argument("--dilation", type=dilation_arg, default=None,
                   help="a number, or auto: `collective` defaults to auto (the smallest D this machine keeps on "
                        "time, retried larger if the run falls behind); `link` defaults to 1000")
    p.add_argument("--backend", choices=("native", "bmv2"), default="native", help="for `collective`")
    p.add_argument("--trim", metavar="SIZE[,DSCP]", help="for `collective`: the fabric trims (see `emu up --help`)")
    p.add_argument("--kernel", action="store_true",
                   help="for `collective`: build the hosts' kernels (a namespace and veths each) on the fabric clock too; without it a "
                        "fabric-clock run, whose traffic is all the engine's, builds none")
    p.add_argument("--core", choices=("native", "python"), default=None,
                   help="for `collective`: what runs the hot path: native, the compiled core (the default where `make setup` built it), or "
                        "python, the reference it is checked against; the same figures bit for bit")
    p.add_argument("--workers", type=int, default=0,
                   help="for `collective`: engine worker processes (default one); N > 1 splits the fabric at its "
                        "longest links, the ranks inside the workers, each on its host's (on the fabric clock kept "
                        "in step by windows)")
    p.add_argument("--machines", metavar="HOST[,HOST...]",
                   help="for `collective`: run the fabric over these machines (see `emu up --help`)")
    p.add_argument("--reset", action="store_true",
                   help="for `calibrate`: forget what --dilation auto has learnt on this machine")
    p.add_argument("--clock", choices=CLOCKS, default=None,
                   help="for `collective`: fabric (the default with the native engine: fabric time is the "
                        "engine's own, exact on any machine) or wall (fabric time = wall time / D)")
    p.add_argument("--links", choices=("auto", "netem", "engine"), default="auto",
                   help="`collective` on bmv2: what carries the links; `link --links engine`: measure the engine's "
                        "wires (a bridge in the switch's place) instead of an engine switch")
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="exit non-zero (3) when the result's fidelity is not ok or was not measured")
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("topologies", help="the fabrics `emu up` builds, with their parameters and defaults")
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_topologies)
    p = sub.add_parser("lab", help="teaching labs: list, start one, check your work on a real fabric")
    p.add_argument("action", choices=("list", "start", "check"))
    p.add_argument("name", nargs="?")
    p.add_argument("--dir", help="your working folder (default ./lab-NAME)")
    p.add_argument("--solution", action="store_true", help="check the lab's own solution instead")
    p.add_argument("--seed", type=int, help="what the checker draws at random (e.g. which plane fails) from this "
                   "seed: a failed check run again the same way (default: a fresh one, printed on failure)")
    p.add_argument("--clock", choices=CLOCKS, help="the clock the checker's fabric keeps (default: the lab's "
                   "first, `emu lab list` says which it has): fabric is exact and as fast as the CPU allows")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_lab)
    return ap


def main(argv: list[str] | None = None) -> int:
    use_stdlib_distutils()  # this process is ours: Mininet's distutils without setuptools' 0.15 s
    argv = sys.argv[1:] if argv is None else argv
    program: list[str] = []
    if argv and argv[0] == "run" and "--" in argv:  # `emu run ... -- PROG ARGS`: PROG's own options are its
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    asks_help = len(argv) > 1 and ("-h" in argv or "--help" in argv)
    named = argv[1] if asks_help else ""
    args, extra = parser(named if argv[0] in ("up", "run") else "",
                         named if argv[0] == "scenario" else "").parse_known_args(argv)
    if args.command == "run":
        args.program = program
    if extra and args.command not in ("up", "scenario", "bench", "replay", "run"):
        parser().error(f"unrecognised arguments: {' '.join(extra)}")
    from emu.cli.progress import work_progress
    from emu.launch import Stopped, stop_on_signals

    restore = stop_on_signals()  # SIGTERM and SIGHUP tear down as Ctrl-C and a normal exit do
    try:
        with work_progress(bool(getattr(args, "json", False))):
            return args.fn(args, extra)
    except Stopped as stop:
        err.print(f"emu {args.command}: stopped by {stop}; everything it made is removed")
        return 128 + stop.signum
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `emu ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
        err.print(f"[red]emu {args.command}: {exc}[/red]")
        return 1
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
