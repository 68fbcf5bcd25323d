"""Run a MetaRoCE perf pair in two hosts' namespaces and collect both sides' results."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from emu.clock import ProcessClock
from emu.launch import child_env, python_module, scratch_dir
from emu.roce.perf import PerfJob, WritesJob

Popen = Callable[[list[str]], subprocess.Popen]


def mininet_popen(host: Any) -> Popen:
    return lambda cmd: host.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True)


def pid_popen(pid: int) -> Popen:
    """Enter a running Mininet host by its shell's pid (what `emu roce perf` uses from outside)."""
    return lambda cmd: subprocess.Popen(["mnexec", "-a", str(pid), *cmd], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=child_env(), text=True)


class PerfRun:
    """Start a server and one or more clients writing to it; `wait()` returns (client results, server)."""

    def __init__(self, src: Popen | list[Popen], dst: Popen, *, nbytes: int, dilation: float, cc: str = "none",
                 message: int = 1 << 20, timeout: float | None = None, lat_iters: int = 5, mtu: int = 1024,
                 plane_rate_bps: float = 100e9, trim_dscp: int | None = None, spray: str = "weighted") -> None:
        """`timeout` (wall s): by default it follows the work and D, as if the writes crawled at
        1 Gb/s of fabric rate (a fixed 300 s cut a slow machine's run at a large D short: a run that
        falls behind must say so in its verdict, not time out)."""
        self.dir = scratch_dir("roce")
        srcs = src if isinstance(src, list) else [src]
        # The endpoints' clock, its epoch given to each: their traces and the harness's instants (a plane
        # failed at) are on one time line.
        self.clock = clock = ProcessClock(dilation)
        if timeout is None:
            timeout = 120.0 + clock.wall_s(nbytes * len(srcs) * 8 / 1e9 + lat_iters * 1e-4)
        args = ["--bytes", str(nbytes), "--dilation", str(dilation), "--epoch", repr(clock.epoch), "--cc", cc, "--message", str(message),
                "--timeout", str(timeout), "--lat-iters", str(lat_iters), "--mtu", str(mtu),
                "--plane-rate", str(plane_rate_bps), "--spray", spray] + ([] if trim_dscp is None else ["--trim-dscp", str(trim_dscp)])
        py = python_module("emu.roce.perf")
        self.timeout = timeout
        self.many = isinstance(src, list)
        self.server = dst(py + ["server", self.dir, *args, "--clients", str(len(srcs))])
        self.clients = [s(py + ["client", self.dir, *args, "--index", str(i)]) for i, s in enumerate(srcs)]

    def wait(self) -> tuple[Any, dict[str, Any]]:
        try:
            out = []
            for proc in [*self.clients, self.server]:
                stdout, stderr = proc.communicate(timeout=self.timeout + 30)
                if proc.returncode != 0:
                    raise RuntimeError(f"MetaRoCE endpoint failed: {stderr.strip()[-800:]}")
                out.append(json.loads(stdout))
            return (out[:-1] if self.many else out[0]), out[-1]
        finally:
            for proc in [*self.clients, self.server]:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            shutil.rmtree(self.dir, ignore_errors=True)


class EngineWrites:
    """Writes between pairs of hosts at once on the fabric clock (emu.roce.perf.WritesJob): `hosts`
    maps each host's name to its planes (FabricNet.host_planes); `pairs` are (source, destination)
    names, a host the source of one pair at most. `wait()`: per pair {src, dst, client, data_ok}."""

    def __init__(self, engine: Any, hosts: dict[str, list[list[Any]]], pairs: list[tuple[str, str]], *, nbytes: int,
                 cc: str = "none", message: int = 1 << 20, mtu: int = 1024, seed: int = 1,
                 trim_dscp: int | None = None) -> None:
        rate = min(p[3] for planes in hosts.values() for p in planes) * min(len(p) for p in hosts.values())
        params = {"hosts": hosts, "pairs": [list(p) for p in pairs], "nbytes": nbytes, "message": message, "cc": cc,
                  "mtu": mtu, "seed": seed, "trim_dscp": trim_dscp,
                  # 100 times every byte through one host's ports: stuck, not slow.
                  "budget_s": 100 * nbytes * 8 * len(pairs) / rate + 0.01}
        self.engine = engine
        self.job = engine.start_job(WritesJob, params)
        self.kernel_frames = 0

    def wait(self) -> list[dict[str, Any]]:
        state = self.engine.wait_job(self.job, WritesJob.merge)
        self.kernel_frames = int(state["kernel_frames"])
        return state["result"]["pairs"]


class EnginePerf:
    """The same exchange on the fabric clock, inside the engine (emu.roce.perf.PerfJob): clients and
    server given by their planes ([switch, port, IPv6 address, rate b/s] each, as
    FabricNet.host_planes gives them). `wait()` returns what PerfRun's does, plus nothing late."""

    def __init__(self, engine: Any, src: list[list[Any]] | list[list[list[Any]]], dst: list[list[Any]], *, nbytes: int,
                 cc: str = "none", message: int = 1 << 20, lat_iters: int = 5, mtu: int = 1024, seed: int = 1,
                 port_events: list[tuple[float, bool, list[tuple[str, str]]]] | None = None,
                 trim_dscp: int | None = None, spray: str = "weighted") -> None:
        """`port_events`: (fabric s after the start, up, [(switch, port), ...]) each, done by the
        engine at that fabric time (emu.dataplane.job.Job). `trim_dscp`: the fabric trims, and trimmed
        packets arrive with this DSCP (the endpoints' trimming mode, emu.roce.transport.Device). `spray`:
        the endpoints' spraying, "weighted" or "equal" (Device)."""
        self.many = bool(src) and isinstance(src[0][0], list)
        clients = src if self.many else [src]
        rate = sum(p[3] for p in dst)
        params = {"nbytes": nbytes, "message": message, "cc": cc, "mtu": mtu, "seed": seed, "lat_iters": lat_iters,
                  "trim_dscp": trim_dscp, "spray": spray,
                  "server": dst, "clients": clients,
                  "port_events": [[after, up, [list(p) for p in ports]] for after, up, ports in port_events or []],
                  # 100 times the bytes at the server's line rate: stuck, not slow.
                  "budget_s": 100 * (nbytes * 8 * len(clients) / rate + lat_iters * 20e-6) + 0.01}
        self.engine = engine
        self.t0_fabric_s = 0.0
        self.job = engine.start_job(PerfJob, params)
        self.kernel_frames = 0

    def wait(self) -> tuple[Any, dict[str, Any]]:
        state = self.engine.wait_job(self.job, PerfJob.merge)
        self.kernel_frames = int(state["kernel_frames"])
        out = state["result"]
        self.t0_fabric_s = float(out.get("t0_fabric_s", 0.0))  # the job's start, on its traces' clock
        return (out["clients"] if self.many else out["clients"][0]), out["server"]
