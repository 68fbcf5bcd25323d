"""Checker of lab congestion-spreading: the student reads the pause tree of a real PFC incast."""

from __future__ import annotations

from typing import Any

from emu import FabricNet, FPFTopo
from emu.labs import StepFailed
from emu.roce.run import EngineWrites
from emu.scenarios.congestion_spreading import pause_tree

MODULE = "spreading.py"
CLOCKS = ("fabric",)
CLOCK_NOTE = "its writes run inside the engine, so the tree is the same every run"
HOT = {"p0l0", "p0l1", "p0s0", "p0s1"}
_tree: list[dict[str, Any]] = []


def _pauses() -> list[dict[str, Any]]:
    """The pause tree of the lab's incast, run once."""
    if not _tree:
        with FabricNet(FPFTopo(gpus=18, planes=1, leaves=3), clock="fabric") as net:
            pairs = [(f"gpu{6 + i}", "gpu0") for i in range(6)] + [("gpu12", "gpu1"), ("gpu13", "gpu2")]
            hosts = {h: net.host_planes(h) for pair in pairs for h in pair}
            done = EngineWrites(net.engine, hosts, pairs, nbytes=4 << 20).wait()
            if not all(p["data_ok"] for p in done):
                raise RuntimeError("the incast's data did not arrive intact: the checker's fabric, not your code")
            _tree.extend(pause_tree(net, net.engine.stats()))
    return _tree


def step_who(work, net: None) -> str:
    """Step 1: who paused whom"""
    tree = _pauses()
    for node in ("p0l0", "p0s1", "p0l2", "gpu0"):
        truth = sorted({e["paused"] for e in tree if e["pauser"] == node})
        said = list(work.paused_by(tree, node))
        if said != truth:
            raise StepFailed(f"{node} paused {truth or 'nobody'}; paused_by said {said}: the edges whose pauser "
                             "is the node, their `paused` ends")
    return "p0l0 paused " + ", ".join(sorted({e["paused"] for e in tree if e["pauser"] == "p0l0"}))


def step_spread(work, net: None) -> str:
    """Step 2: how far it spread"""
    tree = _pauses()
    truth = sorted({e["paused"] for e in tree if e["paused"].startswith("p") and e["paused"] not in HOT})
    if not truth:
        raise RuntimeError("the pauses reached no switch beyond the hot ones: the checker's fabric, not your code")
    said = list(work.spread_beyond(tree, set(HOT)))
    if said != truth:
        raise StepFailed(f"the pauses reached {truth} beyond the switches that carry the incast; spread_beyond "
                         f"said {said}")
    return f"beyond the incast's switches: {', '.join(truth)}"


def step_held(work, net: None) -> str:
    """Step 3: how long"""
    tree = _pauses()
    for node in ("p0l2", "p0l1", "gpu0"):
        truth = sum(e["paused_fabric_s"] for e in tree if e["paused"] == node)
        said = float(work.held_for(tree, node))
        if abs(said - truth) > 1e-12:
            raise StepFailed(f"{node} was held {truth * 1e6:.1f} us of fabric time in all; held_for said "
                             f"{said * 1e6:.1f} us: every link that paused it counts")
    held = sum(e["paused_fabric_s"] for e in tree if e["paused"] == "p0l2")
    return f"p0l2, which carries no incast traffic, held {held * 1e6:.0f} us"


STEPS = [step_who, step_spread, step_held]
