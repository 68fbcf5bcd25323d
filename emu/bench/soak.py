"""`emu bench soak`: many bring-ups and tear-downs, runs killed -9 at random points, malformed frames,
PFC incasts; after each, what exists is compared with what existed before the soak.

What is compared: root-namespace interfaces, named namespaces, processes of ours (emu modules,
Mininet shells, simple_switch, mnexec), run folders and scratch folders under /run/emu. A kill lands at
a random time (seeded) between 0.2 s and the wall time of one whole uncut run, so it falls in
build, test or tear-down; `emu clean` follows it, and the next cycle is a fresh run that must work.
Malformed frames go from a host onto its switch port (random bytes, truncated and lying headers);
the switch must count them as drops, keep running, and forward good traffic after. The figures
(cycles, kills, leftovers, failures, times) are the result; nothing is judged by time.
"""

from __future__ import annotations

import os
import platform
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

from emu.launch import RUN_ROOT, SCRATCH, child_env, python_module, scratch_dir
from emu.net.cleanup import clean
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.run import mininet_popen
from emu.topo.fpf import FPFTopo

_OURS = re.compile(r"-m emu\.|mininet:|^simple_switch|^mnexec")
KILLED_RUN = ["up", "fpf", "--gpus", "8", "--planes", "4", "--test", "pingall"]


def snapshot() -> set[str]:
    """Everything a run of ours can leave, as one set of labelled names (pids with their command)."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    items = {"link " + line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2}
    for folder, label in (("/run/netns", "netns"), (RUN_ROOT, "run"), (SCRATCH, "scratch")):
        if os.path.isdir(folder):
            items |= {f"{label} {n}" for n in os.listdir(folder) if label != "run" or n.startswith("run-")}
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if int(pid) != me and _OURS.search(cmd) and "emu.bench.soak" not in cmd:
            items.add(f"process {pid} {cmd[:80]}")
    return items


def _left(base: set[str]) -> list[str]:
    """What exists now and did not before, after a moment for killed processes to go."""
    deadline = time.monotonic() + 3.0
    while True:
        new = sorted(snapshot() - base)
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.2)


def _emu(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(python_module("emu.cli.main", *args), capture_output=True, text=True, timeout=timeout,
                          env=child_env(), cwd="/")


def malformed_frames(n: int, seed: int, src_mac: bytes) -> list[bytes]:
    """`n` frames a switch must drop: random bytes, runts, and IPv4 / IPv6 / SRv6 / RoCE headers that lie."""
    rng = random.Random(seed)
    dst = b"\xff" * 6
    out = []
    for i in range(n):
        kind = i % 5
        if kind == 0:  # noise of any length
            out.append(dst + src_mac + rng.randbytes(rng.randint(2, 1500)))
        elif kind == 1:  # IPv4 that ends inside its own header, or claims more than it has
            ip = bytes([0x45, 0, 0xFF, 0xFF]) + rng.randbytes(16)
            out.append(dst + src_mac + b"\x08\x00" + ip[:rng.randint(0, 20)])
        elif kind == 2:  # IPv6 with a payload length past the frame
            ip6 = struct.pack("!IHBB", 0x60000000, 0xFFFF, 17, 64) + rng.randbytes(32)
            out.append(dst + src_mac + b"\x86\xdd" + ip6 + rng.randbytes(rng.randint(0, 16)))
        elif kind == 3:  # a routing header (SRv6) whose segments-left points past its list
            srh = bytes([17, 2, 4, 200, 0, 0, 0, 0]) + rng.randbytes(16)
            ip6 = struct.pack("!IHBB", 0x60000000, len(srh), 43, 64) + rng.randbytes(32)
            out.append(dst + src_mac + b"\x86\xdd" + ip6 + srh)
        else:  # UDP to the RoCE port with a truncated base transport header
            udp = struct.pack("!HHHH", 49152, 4791, 12, 0) + rng.randbytes(4)
            ip6 = struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + rng.randbytes(32)
            out.append(dst + src_mac + b"\x86\xdd" + ip6 + udp)
    return out


def _fuzz_main(ifname: str, n: int, seed: int) -> int:
    """In a host: send the malformed frames out of `ifname` (raw, so nothing of the kernel's fixes them)."""
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        mac = s.getsockname()[4]
        for frame in malformed_frames(n, seed, mac):
            s.send(frame)
    print(n)
    return 0


def _fuzz(net: FabricNet, n: int, seed: int) -> dict[str, Any]:
    host = net.get("gpu0")
    before = net.stats().switch("p0l0").drops
    r = mininet_popen(host)(python_module("emu.bench.soak", "fuzz", "gpu0-eth0", str(n), str(seed)))
    out, err = r.communicate(timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"fuzz sender failed: {err.strip()[-400:]}")
    time.sleep(0.5)
    dropped = net.stats().switch("p0l0").drops - before
    ping = net.pingall_planes()
    return {"frames": n, "dropped": dropped, "pingall_after_loss_pct": ping.loss, "engine_alive": not net.deaths}


def run(params: dict[str, str]) -> dict[str, Any]:
    from emu.scenarios import run_scenario

    unknown = sorted(set(params) - {"cycles", "kills", "fuzz", "incasts", "seed"})
    if unknown:
        raise ValueError(f"soak: unknown option --{unknown[0]}; options: --cycles --kills --fuzz --incasts --seed")
    cycles = int(params.get("cycles", "20"))
    kills = int(params.get("kills", "10"))
    fuzz = int(params.get("fuzz", "20000"))
    incasts = int(params.get("incasts", "3"))
    seed = int(params.get("seed", "1"))
    if min(cycles, kills, fuzz, incasts) < 0 or cycles + kills + incasts == 0 and fuzz == 0:
        raise ValueError("soak: cycles, kills, fuzz and incasts are counts >= 0, not all 0")
    rng = random.Random(seed)
    clean()
    base = snapshot()
    failures: list[str] = []
    leftovers: list[str] = []
    up_s, down_s, fuzzed = [], [], []
    for i in range(cycles):
        t0 = time.monotonic()
        try:
            with FabricNet(FPFTopo(gpus=4, planes=2, leaves=1), settings=RunSettings()) as net:
                t1 = time.monotonic()
                loss = net.pingall_planes().loss
                if loss:
                    failures.append(f"cycle {i}: pingall lost {loss:.1f} %")
                if fuzz and i == 0:
                    fuzzed.append(_fuzz(net, fuzz, seed))
                t2 = time.monotonic()
            up_s.append(t1 - t0)
            down_s.append(time.monotonic() - t2)
        except Exception as exc:  # a failed cycle is a figure of the soak, not its end
            failures.append(f"cycle {i}: {type(exc).__name__}: {exc}")
        leftovers += [f"cycle {i}: {x}" for x in _left(base)]
    full_s = 0.0
    if kills:  # how long one uncut run takes: kills land anywhere in it
        t0 = time.monotonic()
        full = _emu(*KILLED_RUN)
        full_s = time.monotonic() - t0
        if full.returncode != 0:
            failures.append(f"uncut run: exit {full.returncode}: {full.stderr.strip()[-300:]}")
    kill_at = []
    for k in range(kills):
        at = rng.uniform(0.2, max(0.3, full_s))
        proc = subprocess.Popen(python_module("emu.cli.main", *KILLED_RUN), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, env=child_env(), cwd="/")
        time.sleep(at)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        kill_at.append(round(at, 2))
        r = _emu("clean")
        if r.returncode != 0:
            failures.append(f"kill {k} at {at:.2f} s: emu clean exit {r.returncode}: {r.stderr.strip()[-300:]}")
        leftovers += [f"kill {k} at {at:.2f} s: {x}" for x in _left(base)]
        after = _emu("up", "fpf", "--gpus", "4", "--planes", "2", "--test", "pingall", "--json")
        if after.returncode != 0:
            failures.append(f"run after kill {k}: exit {after.returncode}: {after.stderr.strip()[-300:]}")
    incast = []
    for j in range(incasts):
        out_dir = scratch_dir("soak")
        try:
            try:
                # At auto D: at a D the senders cannot keep, the incast may never congest (no PFC at all).
                # A 256 KiB port buffer: with the default 1 MiB, how the flows hash over the spines decides
                # whether any one ingress reaches XOFF (lossless either way; PFC sent or not).
                r = run_scenario("incast", {"senders": "5", "bytes": "512KiB"}, RunSettings(buffer_per_port=256 << 10),
                                 out_dir=out_dir)
                got = {"dilation": r["dilation"], "drops_lossless": r["drops_lossless"], "pfc_frames": r["pfc_frames"],
                       "delivered_all": r["delivered_bytes"] == r["planned_bytes"], "queue_hwm_bytes": r["queue_hwm_bytes"],
                       "fidelity_ok": r["fidelity"]["ok"], "passed": r["passed"]}
                incast.append(got)
                if not r["passed"]:
                    failures.append(f"incast {j}: {got}")
            except Exception as exc:
                failures.append(f"incast {j}: {type(exc).__name__}: {exc}")
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        leftovers += [f"incast {j}: {x}" for x in _left(base)]
    for f in fuzzed:
        if f["dropped"] < f["frames"] or f["pingall_after_loss_pct"] or not f["engine_alive"]:
            failures.append(f"fuzz: {f}")
    return {
        "bench": "soak",
        "machine": f"{platform.machine()} Linux {platform.release()}, {os.cpu_count()} cores",
        "how": "FPF 4x2 up / pingall / down cycles; `emu up fpf --gpus 8 --planes 4 --test pingall` killed -9 "
               "(its process group) at a seeded random time within one uncut run, then `emu clean` and a fresh "
               "run; malformed frames from gpu0 onto p0l0; PFC incasts (5 senders, 512 KiB each, 256 KiB port buffers, at the scenario's auto D); "
               "leftovers: interfaces, namespaces, processes and /run/emu folders not there before",
        "cycles": cycles, "kills": kills, "kill_at_s": kill_at, "uncut_run_s": round(full_s, 2),
        "up_s": _spread(up_s), "down_s": _spread(down_s), "fuzz": fuzzed, "incasts": incast,
        "leftovers": leftovers, "failures": failures, "passed": not leftovers and not failures,
    }


def _spread(xs: list[float]) -> dict[str, float]:
    return {"min": round(min(xs), 2), "median": round(sorted(xs)[len(xs) // 2], 2), "max": round(max(xs), 2)} if xs \
        else {}


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "fuzz":
        sys.exit(_fuzz_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    print("usage: python -m emu.bench.soak fuzz IFACE FRAMES SEED (emu bench soak runs it in a host)", file=sys.stderr)
    sys.exit(2)
