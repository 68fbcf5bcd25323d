"""Paced UDP flows between a fabric's hosts, counted at the receivers, in fabric units.

Two ways to run the same flows, both giving `wait()` the same answer: per
flow what it sent, per receiver what arrived (by source and in time bins),
every time in fabric seconds. `EngineFlows` runs them inside the engine
(emu.traffic.job), on either clock: on the fabric clock, exact. `KernelFlows`
runs them (on BMv2) as paced processes in the hosts (emu.traffic.udp) whose
frames cross the hosts' kernels at 1/D of the fabric's speed, and converts what they measured in
wall seconds: D is applied here and nowhere above. Which one a run uses is
its timebase's choice (emu.net.timebase); a test that wants the kernel's
frames on any clock names `KernelFlows`.

A run may fail one plane under the flows: `fail_plane=(plane, fraction)`
takes every port of that plane down once the flow leaving on it is that
fraction through (on the fabric clock at the fabric time that takes at the
flow's rate, done by the engine; on the wall clock when its first switch has
forwarded that share of its bytes), and brings them back up after.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emu.clock import ProcessClock
from emu.fidelity import packet_time_s
from emu.launch import child_env, python_module
from emu.packet import udp_headers
from emu.traffic.job import UdpJob

if TYPE_CHECKING:
    from emu.net.fabric import FabricNet

Received = dict[tuple[str, int, bool], dict[str, Any]]  # (host, UDP port, IPv6) -> what its receiver counted


class FlowError(RuntimeError):
    """A sender or receiver failed, or did not start; the message says which and why."""


@dataclass(frozen=True)
class Flow:
    """`nbytes` (bytes) from host `src` to `dst_ip` (on host `dst`), paced at `rate_bps` (fabric bits per
    second) in `size`-byte datagrams; `tos` the IP TOS byte; `flows` source ports to spread over (ECMP
    entropy)."""

    src: str
    dst: str
    dst_ip: str
    port: int
    nbytes: int
    rate_bps: float
    size: int = 1400
    tos: int = 0
    flows: int = 1

    @property
    def wire_bytes(self) -> int:
        return -(-self.nbytes // self.size) * self.size  # whole datagrams, as sent


def _failing_flow(net: FabricNet, flows: list[Flow], plane: int) -> tuple[Flow, str]:
    """The flow that leaves by plane `plane`, and its first switch."""
    ports = {sw for sw, _ in net.plane_ports(plane)}
    for f in flows:
        switch = net.host_port(f.src, f.dst_ip)[0]
        if switch in ports:
            return f, switch
    raise ValueError(f"fail_plane: no flow leaves by plane {plane}")


class EngineFlows:
    """The flows inside the engine, on the fabric clock (emu.traffic.job). A flow leaves by the plane its
    kernel route would take (FabricNet.host_port) and is counted on the port its destination address is
    on. After `wait()`: `kernel_frames` (the kernel's frames the engine took meanwhile: none, for an exact
    run) and `failed_at_s` (with fail_plane: when, on the receivers' clock)."""

    def __init__(self, net: FabricNet, flows: list[Flow], *, bin_s: float = 1e-6,
                 fail_plane: tuple[int, float] | None = None) -> None:
        def end(host: str, ip: str) -> list[str]:
            switch, port, _ = net.host_port(host, ip)
            return [switch, port, ip]

        self.net = net
        self.after_s: float | None = None
        self.down: list[tuple[str, str]] = []
        if fail_plane is not None:
            f, _ = _failing_flow(net, flows, fail_plane[0])
            # At the fabric time the flow is that far through at its rate (each datagram on the wire with
            # its headers, preamble and gap).
            self.after_s = fail_plane[1] * -(-f.nbytes // f.size) * packet_time_s(
                f.rate_bps, f.size + udp_headers(":" in f.dst_ip) + 24)
            self.down = net.plane_ports(fail_plane[0])
        params = {"flows": [{"src": end(f.src, net.host_port(f.src, f.dst_ip)[2]), "dst": end(f.dst, f.dst_ip),
                             "dst_host": f.dst, "port": f.port,
                             "nbytes": f.nbytes, "size": f.size, "rate_bps": f.rate_bps, "tos": f.tos,
                             "flows": f.flows, "sport": 40000 + 64 * i} for i, f in enumerate(flows)],
                  "bin_s": bin_s,
                  # Quiet this long, a receiver's count ends: twice the longest flow's shortest path, so that
                  # a flow steered the long way round (an SRv6 policy on a ring) still arrives (a pair whose
                  # first planes do not meet has no such path: it leaves the floor, IDLE_S).
                  "quiet_s": 2 * max((w for w in (net.one_way_s(f.src, f.dst) for f in flows) if math.isfinite(w)),
                                     default=0.0),
                  "port_events": [[self.after_s, False, [list(p) for p in self.down]]] if self.down else [],
                  # 100 times the bytes at the slowest flow's rate: stuck, not slow.
                  "budget_s": 100 * sum(f.wire_bytes for f in flows) * 8 / min(f.rate_bps for f in flows) + 0.01}
        # The receivers in the job's order (one a destination host, UDP port and family), as results are keyed.
        self.keys = list(dict.fromkeys((f.dst, f.port, ":" in f.dst_ip) for f in flows))
        self.job = net.engine.start_job(UdpJob, params)
        self.kernel_frames = 0
        self.failed_at_s: float | None = None

    def wait(self) -> tuple[list[dict[str, Any]], Received]:
        try:
            state = self.net.engine.wait_job(self.job, UdpJob.merge)
        finally:
            for sw, port in self.down:
                self.net.engine.set_port(sw, port, True)
        self.kernel_frames = int(state["kernel_frames"])
        result = state["result"]
        if self.after_s is not None:
            self.failed_at_s = float(result["t0_fabric_s"]) + self.after_s
        return result["sent"], dict(zip(self.keys, result["received"], strict=True))


class KernelFlows:
    """The flows as paced processes in the hosts, their frames the kernels' (emu.traffic.udp): receivers
    first (each says when it is bound), then the senders, each at the flow's rate / D.

    Every wall-clock limit scales with D: a receiver gives up after `idle_s` of wall time or 20 us of
    fabric time without a packet, whichever is longer, and waits at most three times the fabric time its
    bytes take at the slowest sender's rate (a fixed 120 s cut an incast at D = 200 000 short, and the
    bytes it had not yet counted looked lost)."""

    kernel_frames = 0  # every frame is the kernel's: none is counted apart

    def __init__(self, net: FabricNet, flows: list[Flow], *, idle_s: float = 3.0,
                 fail_plane: tuple[int, float] | None = None) -> None:
        self.net = net
        self.dilation = net.settings.dilation
        self.wall = wall = ProcessClock(self.dilation)  # the processes' clock: D applied here, at the edge
        py = python_module("emu.traffic.udp")
        expect: dict[tuple[str, int, bool], int] = {}
        slowest: dict[tuple[str, int, bool], float] = {}
        for f in flows:
            key = (f.dst, f.port, ":" in f.dst_ip)
            expect[key] = expect.get(key, 0) + f.wire_bytes
            slowest[key] = min(slowest.get(key, f.rate_bps), f.rate_bps)
        bin_s = max(0.005, wall.wall_s(10e-6))
        idle = max(idle_s, wall.wall_s(20e-6))
        self.timeout = 60.0 + max(wall.wall_s(3 * expect[k] * 8 / slowest[k]) for k in expect) if expect else 60.0
        self.receivers: dict[tuple[str, int, bool], subprocess.Popen[str]] = {}
        self.senders: list[subprocess.Popen[str]] = []
        self.failed_at_s: float | None = None
        self.plane: int | None = None
        try:
            for (dst, port, v6), total in expect.items():
                cmd = py + ["recv", str(port), "--expect", str(total), "--idle", f"{idle:g}", "--bin", str(bin_s),
                            "--timeout", f"{self.timeout:.0f}"]
                proc = net.get(dst).popen(cmd + (["-6"] if v6 else []), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, env=child_env(), text=True)
                self.receivers[(dst, port, v6)] = proc
                line = proc.stdout.readline() if proc.stdout else ""
                if "ready" not in line:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise FlowError(f"receiver on {dst} port {port} did not start: {err.strip()}")
            for f in flows:
                cmd = py + ["send", f.dst_ip, str(f.port), "--bytes", str(f.nbytes), "--size", str(f.size),
                            "--rate", str(wall.wall_bps(f.rate_bps)), "--tos", str(f.tos), "--flows", str(f.flows)]
                self.senders.append(net.get(f.src).popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                         env=child_env(), text=True))
            if fail_plane is not None:
                f, switch = _failing_flow(net, flows, fail_plane[0])
                net.wait_forwarded(switch, int(fail_plane[1] * f.nbytes))
                net.fail(plane=fail_plane[0])
                self.plane = fail_plane[0]
                # One system-wide monotonic clock in every namespace, as the receivers'.
                self.failed_at_s = wall.fabric_s(time.monotonic())
        except BaseException:
            self._kill()
            raise

    def _kill(self) -> None:
        for proc in [*self.senders, *self.receivers.values()]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def wait(self, timeout: float | None = None) -> tuple[list[dict[str, Any]], Received]:
        timeout = timeout or self.timeout + 60
        try:
            sent = []
            for proc in self.senders:
                out, err = proc.communicate(timeout=timeout)
                if proc.returncode != 0:
                    raise FlowError(f"a sender failed: {err.strip()}")
                sent.append(json.loads(out))
            got = {}
            for key, proc in self.receivers.items():
                out, err = proc.communicate(timeout=timeout)
                if proc.returncode != 0:
                    raise FlowError(f"the receiver on {key[0]} failed: {err.strip()}")
                got[key] = self._fabric_units(json.loads(out))
        finally:
            self._kill()
            if self.plane is not None:
                self.net.restore(plane=self.plane)
        return sent, got

    def _fabric_units(self, r: dict[str, Any]) -> dict[str, Any]:
        """A receiver's wall-clock figures as fabric ones (the engine's receivers' layout)."""
        first = r.pop("first_monotonic")
        fabric_s = self.wall.fabric_s
        return {**r, "bin_s": fabric_s(r["bin_s"]), "first_s": None if first is None else fabric_s(first),
                "duration_s": fabric_s(r.pop("wall_s"))}
