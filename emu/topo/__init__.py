"""Topologies by name, with the dataclass that validates each one's parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

from emu.topo.bag import BAGParams, BAGTopo
from emu.topo.common import TopologyError
from emu.topo.fpf import FPFParams, FPFTopo
from emu.topo.nsf import NSFParams, NSFTopo
from emu.topo.rbb import RBBParams, RBBTopo
from emu.topo.tahan import TahanParams, TahanTopo

TOPOLOGIES: dict[str, tuple[type, type]] = {
    "fpf": (FPFTopo, FPFParams),
    "nsf": (NSFTopo, NSFParams),
    "bag": (BAGTopo, BAGParams),
    "tahan": (TahanTopo, TahanParams),
    "rbb": (RBBTopo, RBBParams),
}


def make_topo(name: str, params: dict[str, str]) -> Any:
    """Build a topology from string parameters (CLI or `mn --topo name,k=v`), validated first."""
    if name not in TOPOLOGIES:
        raise TopologyError(f"unknown topology {name!r}; known: {', '.join(sorted(TOPOLOGIES))}")
    topo_cls, params_cls = TOPOLOGIES[name]
    fields = {f.name: f for f in dataclasses.fields(params_cls)}
    typed: dict[str, Any] = {}
    for key, value in params.items():
        key = key.replace("-", "_")
        if key not in fields:
            raise TopologyError(f"{name}: unknown parameter {key!r}; known: {', '.join(fields)}")
        kind = fields[key].type
        try:
            typed[key] = int(value) if kind in (int, "int") else value
        except ValueError:
            raise TopologyError(f"{name}: {key} must be an integer, got {value!r}") from None
    getattr(params_cls, "make", params_cls)(**typed)  # one clear error before anything is created
    return topo_cls(**typed)


__all__ = ["TOPOLOGIES", "make_topo", "TopologyError"]
