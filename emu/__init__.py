"""A packet-level emulator of AI data-center fabrics on Linux namespaces.

    from emu import FabricNet, FPFTopo

    with FabricNet(FPFTopo(gpus=2, planes=2), dilation=10_000) as net:
        print(net.pingall_planes().loss)
        net.fail(plane=1)

The public names load on first use, so that a worker process importing one
module below (emu.units, emu.dataplane) does not pull in Mininet.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# numpy's BLAS starts a thread per core that spins after each call: nothing here multiplies matrices, and
# those threads took the cores the engine's worker and the endpoints need (3 % of each process's samples).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def use_stdlib_distutils() -> None:
    """Mininet imports distutils.version (for one version compare). Where setuptools' shim stands in front
    of the standard library's distutils (a venv's distutils-precedence.pth), that import loads setuptools
    and pkg_resources: 0.15 s of the start of every process of ours that uses Mininet. Python 3.11's own
    distutils (1 ms) is used where it is installed whole; elsewhere (3.12, or a distribution that ships
    only part of it) the shim stays and Mininet gets setuptools' copy as before. Called by the `emu`
    command, a process that is ours, never on `import emu`: a user's program that imports emu and then
    setuptools keeps the import state it would have had (setuptools warns when distutils came first)."""
    import sys

    if "distutils" in sys.modules or sys.version_info >= (3, 12):
        return
    try:
        import _distutils_hack  # type: ignore[import-not-found]
    except ImportError:
        return
    if getattr(_distutils_hack, "DISTUTILS_FINDER", None) not in sys.meta_path:
        return
    import importlib.util
    import warnings

    _distutils_hack.remove_shim()
    try:
        spec = importlib.util.find_spec("distutils")
        found = spec is not None and bool(spec.submodule_search_locations) and all(
            os.path.exists(os.path.join(spec.submodule_search_locations[0], f"{m}.py")) for m in ("version", "util"))
    except (ImportError, ValueError):
        found = False
    if not found:
        _distutils_hack.add_shim()
        return
    with warnings.catch_warnings():  # deprecated in 3.11, and ours to choose here, not the user's to read
        warnings.simplefilter("ignore", DeprecationWarning)
        import distutils.version  # noqa: F401


_PUBLIC = {
    "FabricNet": "emu.net.fabric",
    "PingResult": "emu.net.fabric",
    "RoceWrite": "emu.net.fabric",
    "Flow": "emu.net.flows",
    "Tenant": "emu.collectives.run",
    "Timebase": "emu.net.timebase",
    "RunSettings": "emu.net.switch",
    "FabricStats": "emu.net.stats",
    "PortStats": "emu.net.stats",
    "FabricTopo": "emu.topo.common",
    "TopologyError": "emu.topo.common",
    "FPFTopo": "emu.topo.fpf",
    "NSFTopo": "emu.topo.nsf",
    "BAGTopo": "emu.topo.bag",
    "TahanTopo": "emu.topo.tahan",
    "RBBTopo": "emu.topo.rbb",
    "Scenario": "emu.scenarios.base",
    "Incast": "emu.scenarios.incast",
    "PlaneDown": "emu.scenarios.plane_down",
    "Srv6Te": "emu.scenarios.srv6_te",
    "FpfVsNsf": "emu.scenarios.fpf_vs_nsf",
    "Headroom": "emu.scenarios.headroom",
    "Wcmp": "emu.scenarios.wcmp",
    "Dcqcn": "emu.scenarios.dcqcn",
    "RocePlaneDown": "emu.scenarios.roce_plane_down",
    "BagCollective": "emu.scenarios.bag_collective",
    "Trimming": "emu.scenarios.trimming",
    "CongestionSpreading": "emu.scenarios.congestion_spreading",
    "DegradedPlane": "emu.scenarios.degraded_plane",
    "ReplicaExclusion": "emu.scenarios.replica_exclusion",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'emu' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
