"""What scenarios share: UDP flows between hosts, fabric-wide counters, results on disk."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from emu.launch import child_env, python_module
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.traffic.job import UdpJob

HEADERS = 42  # Ethernet + IPv4 + UDP
ECT0 = 0b10
DSCP_LOSSLESS = 26


class ScenarioError(ValueError):
    """A scenario parameter is impossible, or the experiment could not run; the message says which."""


@contextmanager
def fabric(topo: Any, settings: RunSettings) -> Iterator[FabricNet]:
    net = FabricNet(topo, settings=settings)
    try:
        net.start()
        yield net
    finally:
        net.stop()


@dataclass(frozen=True)
class Flow:
    """`nbytes` from host `src` to `dst_ip` (on host `dst`), paced at a fabric rate."""

    src: str
    dst: str
    dst_ip: str
    port: int
    nbytes: int
    rate_bps: float
    size: int = 1400
    tos: int = 0
    flows: int = 1  # source ports to spread over (ECMP entropy)

    @property
    def wire_bytes(self) -> int:
        return -(-self.nbytes // self.size) * self.size  # whole datagrams, as sent


class Traffic:
    """Receivers first (each says when it is bound), then the paced senders.

    Every wall-clock limit scales with the dilation: a receiver gives up after `idle_s` of wall time
    or 20 us of fabric time without a packet, whichever is longer, and waits at most three times the
    fabric time its bytes take at the slowest sender's rate (a fixed 120 s cut an incast at
    D = 200 000 short, and the bytes it had not yet counted looked lost)."""

    kernel_frames = 0  # on the wall clock every frame is the kernel's: none is counted apart

    def __init__(self, net: FabricNet, flows: list[Flow], *, dilation: float, idle_s: float = 3.0) -> None:
        self.net = net
        self.flows = flows
        self.dilation = dilation
        self.py = python_module("emu.traffic.udp")
        expect: dict[tuple[str, int, bool], int] = {}
        slowest: dict[tuple[str, int, bool], float] = {}
        for f in flows:
            key = (f.dst, f.port, ":" in f.dst_ip)
            expect[key] = expect.get(key, 0) + f.wire_bytes
            slowest[key] = min(slowest.get(key, f.rate_bps), f.rate_bps)
        bin_s = max(0.005, 10e-6 * dilation)
        idle = max(idle_s, 20e-6 * dilation)
        self.timeout = 60.0 + max(3 * expect[k] * 8 / slowest[k] * dilation for k in expect) if expect else 60.0
        self.receivers = {}
        for (dst, port, v6), total in expect.items():
            cmd = self.py + ["recv", str(port), "--expect", str(total), "--idle", f"{idle:g}", "--bin", str(bin_s),
                             "--timeout", f"{self.timeout:.0f}"]
            proc = net.get(dst).popen(cmd + (["-6"] if v6 else []), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=child_env(), text=True)
            line = proc.stdout.readline() if proc.stdout else ""
            if "ready" not in line:
                err = proc.stderr.read() if proc.stderr else ""
                raise ScenarioError(f"receiver on {dst} port {port} did not start: {err.strip()}")
            self.receivers[(dst, port, v6)] = proc
        self.senders = []
        for f in flows:
            cmd = self.py + ["send", f.dst_ip, str(f.port), "--bytes", str(f.nbytes), "--size", str(f.size),
                             "--rate", str(f.rate_bps / dilation), "--tos", str(f.tos), "--flows", str(f.flows)]
            self.senders.append(net.get(f.src).popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                     env=child_env(), text=True))

    def wait(self, timeout: float | None = None) -> tuple[list[dict], dict[tuple[str, int, bool], dict]]:
        timeout = timeout or self.timeout + 60
        sent = []
        for proc in self.senders:
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise ScenarioError(f"a sender failed: {err.strip()}")
            sent.append(json.loads(out))
        got = {}
        for key, proc in self.receivers.items():
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise ScenarioError(f"the receiver on {key[0]} failed: {err.strip()}")
            got[key] = json.loads(out)
        return sent, got


class FabricTraffic:
    """The same flows on the fabric clock, run by the engine itself (emu.traffic.job): `wait()` gives
    what Traffic's does (per flow what it sent; per receiver what arrived, by source and in time bins),
    times in fabric seconds. A flow leaves by the plane its kernel route would take (FabricNet.host_port)
    and is counted on the port its destination address is on. `port_events`: (fabric s after the start,
    up, [(switch, port), ...]) each, done by the engine at that fabric time; after `wait()`, `t0_fabric_s`
    is the start on the receivers' clock."""

    def __init__(self, net: FabricNet, flows: list[Flow], *, bin_s: float = 1e-6,
                 port_events: list[tuple[float, bool, list[tuple[str, str]]]] | None = None) -> None:
        def end(host: str, ip: str) -> list[str]:
            switch, port, _ = net.host_port(host, ip)
            return [switch, port, ip]

        params = {"flows": [{"src": end(f.src, net.host_port(f.src, f.dst_ip)[2]), "dst": end(f.dst, f.dst_ip),
                             "dst_host": f.dst, "port": f.port,
                             "nbytes": f.nbytes, "size": f.size, "rate_bps": f.rate_bps, "tos": f.tos,
                             "flows": f.flows, "sport": 40000 + 64 * i} for i, f in enumerate(flows)],
                  "bin_s": bin_s,
                  "port_events": [[after, up, [list(p) for p in ports]] for after, up, ports in port_events or []],
                  # 100 times the bytes at the slowest flow's rate: stuck, not slow.
                  "budget_s": 100 * sum(f.wire_bytes for f in flows) * 8 / min(f.rate_bps for f in flows) + 0.01}
        self.net = net
        self.job = net.engine.start_job("udp", params)
        self.kernel_frames = 0
        self.t0_fabric_s = 0.0

    def wait(self) -> tuple[list[dict], dict[tuple[str, int, bool], dict]]:
        state = self.net.engine.wait_job(self.job, UdpJob.merge)
        self.kernel_frames = int(state["kernel_frames"])
        result = state["result"]
        self.t0_fabric_s = float(result["t0_fabric_s"])
        got = {(r["host"], r["udp_port"], False): r for r in result["received"]}
        return result["sent"], got


def start_traffic(net: FabricNet, flows: list[Flow]) -> Traffic | FabricTraffic:
    """The flows on the fabric's own clock: run by the engine itself on the fabric clock (exact), as
    paced processes in the hosts at the fabric's D on the wall clock. Both `wait()` alike."""
    if net.settings.clock == "fabric":
        return FabricTraffic(net, flows)
    return Traffic(net, flows, dilation=net.settings.dilation)


def totals(stats: dict[str, Any], lossless: tuple[int, ...] = (3,)) -> dict[str, Any]:
    """Fabric-wide sums of the engine's counters."""
    t: dict[str, Any] = {"drops_lossless": 0, "pfc_frames": 0, "ecn_marked": 0, "paused_fabric_s": 0.0,
                         "queue_hwm_bytes": 0, "drops_by_reason": {}}
    # .get: a BMv2 fabric counts what its P4 program and its MACs (the engine's wire boxes) count;
    # drops inside simple_switch's queues are inferred from its counters, per switch ("p4_queue").
    for sw in stats["switches"].values():
        if sw.get("queue_drops"):  # BMv2: inside simple_switch, of no known class
            t["drops_by_reason"]["p4_queue"] = t["drops_by_reason"].get("p4_queue", 0) + sw["queue_drops"]
        for port in sw["ports"].values():
            for reason, n in port.get("drops", {}).items():
                t["drops_by_reason"][reason] = t["drops_by_reason"].get(reason, 0) + n
            t["drops_lossless"] += sum(port.get("drops_tc", [0] * 8)[tc] for tc in lossless)
            t["pfc_frames"] += port.get("pfc_tx", 0)
            t["ecn_marked"] += port.get("ecn_marked", 0)
            t["paused_fabric_s"] += sum(port.get("paused_s", [])) + sum(port.get("host_nic", {}).get("paused_s", []))
            t["queue_hwm_bytes"] = max(t["queue_hwm_bytes"], max(port.get("queue_hwm", [0])))
    return t



def save(out_dir: str, name: str, result: dict[str, Any], draw: Callable[[Any], None] | None) -> dict[str, Any]:
    """Write NAME.json and, if there is a `draw(ax)`, NAME.png; the result gains the plot's path."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    if draw is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        draw(ax)
        fig.tight_layout()
        fig.savefig(base + ".png", dpi=100)
        plt.close(fig)
        result["plot"] = base + ".png"
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    return result


def rate_series(got: dict, dilation: float) -> dict[str, tuple[list[float], list[float]]]:
    """Per source: (fabric time in us, received Gb/s in fabric units) from a receiver's bins."""
    bin_s = got["bin_s"]
    out = {}
    for src, bins in got["bins"].items():
        ks = sorted(int(k) for k in bins)
        out[src] = ([k * bin_s / dilation * 1e6 for k in ks], [bins[str(k)] * 8 / bin_s * dilation / 1e9 for k in ks])
    return out
