"""Topologies by name: each is a FabricTopo whose dataclass fields are its typed parameters."""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any

from emu.topo.bag import BAGTopo
from emu.topo.common import FabricTopo, TopologyError
from emu.topo.fpf import FPFTopo
from emu.topo.nsf import NSFTopo
from emu.topo.rbb import RBBTopo
from emu.topo.tahan import TahanTopo

TOPOLOGIES: dict[str, type[FabricTopo]] = {
    "fpf": FPFTopo,
    "nsf": NSFTopo,
    "bag": BAGTopo,
    "tahan": TahanTopo,
    "rbb": RBBTopo,
}


def make_topo(name: str, params: dict[str, str]) -> FabricTopo:
    """Build a topology from string parameters (CLI or `mn --topo name,k=v`), validated first."""
    if name not in TOPOLOGIES:
        raise TopologyError(f"unknown topology {name!r}; known: {', '.join(sorted(TOPOLOGIES))}")
    cls = TOPOLOGIES[name]
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    typed: dict[str, Any] = {}
    for key, value in params.items():
        key = key.replace("-", "_")
        if key not in fields:
            raise TopologyError(f"{name}: unknown parameter {key!r}; known: {', '.join(fields)}")
        try:
            typed[key] = int(value) if int in typing.get_args(hints[key]) or hints[key] is int else value
        except ValueError:
            raise TopologyError(f"{name}: {key} must be an integer, got {value!r}") from None
    return cls(**typed)  # checked before anything is described, let alone created


def describe(name: str) -> dict[str, Any]:
    """A topology's summary, its parameters (CLI spelling, type, default) and the seed shape it mirrors."""
    cls = TOPOLOGIES[name]
    hints = typing.get_type_hints(cls)
    doc = (cls.__doc__ or "").strip()
    shape = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
    params = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = "int" if int in (hints[f.name], *typing.get_args(hints[f.name])) else "str"
        params.append({"option": "--" + f.name.replace("_", "-"), "type": kind, "default": f.default})
    return {"name": name, "shape": shape, "summary": " ".join(doc.split()), "parameters": params}


__all__ = ["TOPOLOGIES", "FabricTopo", "describe", "make_topo", "TopologyError"]
