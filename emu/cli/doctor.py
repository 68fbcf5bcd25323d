"""`emu doctor`: what this machine offers, probed for real rather than guessed."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

from emu.net.netlink import new_group
from emu.net.netns import kernel_has_netem


def _try(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _veth() -> bool:
    a = f"emud{uuid.uuid4().hex[:8]}"
    # in a device group of this process's (netlink.new_group): `emu clean` leaves it while the doctor runs
    ok = _try(["ip", "link", "add", a, "group", str(new_group()), "type", "veth", "peer", "name", a + "p"])
    if ok:
        _try(["ip", "link", "del", a])
    return ok


def _netns() -> bool:
    ns = f"emu-doctor-{uuid.uuid4().hex[:6]}"
    ok = _try(["ip", "netns", "add", ns])
    if ok:
        _try(["ip", "netns", "del", ns])
    return ok


def kernel_has_seg6local() -> bool:
    """Add a seg6local End route in a throwaway network namespace: kernels built without
    CONFIG_IPV6_SEG6_LWTUNNEL (some CI VMs) refuse it, and the namespace dies with the probe."""
    return _try(["unshare", "-n", "sh", "-c", "ip link set lo up && ip -6 route add fc00::e/128 encap seg6local "
                 "action End dev lo"])


def doctor() -> dict[str, bool]:
    root = os.geteuid() == 0
    try:
        import mininet.net  # noqa: F401

        mininet = shutil.which("mnexec") is not None
    except ImportError:
        mininet = False
    return {
        "root": root,
        "netns": root and _netns(),
        "veth": root and _veth(),
        "netem": root and kernel_has_netem(),
        "seg6local": root and kernel_has_seg6local(),
        "mininet": mininet,
        "bmv2": shutil.which("simple_switch") is not None and shutil.which("simple_switch_CLI") is not None,
        "p4c": shutil.which("p4c-bm2-ss") is not None or shutil.which("p4c") is not None,
        "tshark": shutil.which("tshark") is not None,
        "mpi": shutil.which("mpirun") is not None and shutil.which("mpicc") is not None,  # emu run --mpi
        "faketime": _has_faketime(),  # the ranks' fabric time (emu run)
    }


def _has_faketime() -> bool:
    from emu.net.ranks import faketime_lib

    try:
        return bool(faketime_lib())
    except ValueError:
        return False
