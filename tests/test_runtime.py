"""The running control plane against a recording engine: no root needed."""

from __future__ import annotations

import pytest

from emu.control.routes import Attachment, FabricGraph, compute_tables
from emu.control.runtime import ControlTiming, FabricController


class Recorder:
    def __init__(self) -> None:
        self.pushes: list[str] = []
        self.ports: list[tuple[str, str, bool]] = []

    def set_tables(self, switch, tables):
        self.pushes.append(switch)

    def set_port(self, switch, port, up):
        self.ports.append((switch, port, up))


def bag() -> tuple[FabricGraph, list[Attachment], dict]:
    """a reaches d over two paths: a-b-d (400G then 400G) and a-c-d (400G then a thin 100G)."""
    g = FabricGraph()
    for n in "abcd":
        g.add_switch(n)
    g.add_link("a", 1, "ma1", "b", 0, "mb0", 400e9)
    g.add_link("a", 2, "ma2", "c", 0, "mc0", 400e9)
    g.add_link("b", 1, "mb1", "d", 0, "md0", 400e9)
    g.add_link("c", 1, "mc1", "d", 1, "md1", 100e9)
    names = {(n, i): f"{n}-eth{i}" for n in "abcd" for i in range(3)}
    return g, [Attachment("10.1.0.0/24", "d", 2, "host")], names


def weights(tables, sw):
    t = tables[sw]
    g = t.groups[t.routes[0].group]
    return {m.port: m.weight for m in g.members}


def test_weights_follow_capacity_to_the_destination_not_the_first_hop():
    g, att, _ = bag()
    assert weights(compute_tables(g, att), "a") == {1: 400.0, 2: 100.0}


def controller(hold_down: float) -> tuple[FabricController, Recorder]:
    g, att, names = bag()
    rec = Recorder()
    c = FabricController(rec, g, att, port_names=names, dilation=1.0,
                         timing=ControlTiming(detection_s=0.01, hold_down_s=hold_down))
    return c, rec


def flap(c: FabricController, *, wait_between: bool) -> None:
    """Down, up, down. Each change waits for the event, not for a time: the first for its round of
    updates; the others, with `wait_between`, for theirs too, else they come at once after it."""
    for i, up in enumerate((False, True, False)):
        c.set_link("c", "d", up)
        if i == 0 or wait_between:
            c.settle()
    c.settle()


def test_flapping_link_without_damping_updates_every_time():
    c, rec = controller(hold_down=0.0)
    try:
        flap(c, wait_between=True)
        assert c.recomputes == 3
        assert c.updates == len(rec.pushes) == 3 * 2  # a and c change their tables each time
    finally:
        c.close()


def test_damping_folds_a_flap_into_one_update():
    c, rec = controller(hold_down=1.0)
    try:
        flap(c, wait_between=False)
        # The first change goes through after detection; the two after it fall inside the hold-down
        # and are folded into one recompute at its end, which finds the tables as the first left them.
        assert c.recomputes == 2
        assert c.updates == len(rec.pushes) == 2
        assert ("c", "c-eth1", False) in rec.ports  # the data plane reacted at once all the same
    finally:
        c.close()


def test_failure_moves_all_traffic_to_the_surviving_path():
    c, _ = controller(hold_down=0.0)
    try:
        c.set_link("a", "c", False)
        c.settle()
        (grp,) = [g for g in c.pushed["a"].groups if g.id == c.pushed["a"].routes[0].group]
        assert [m.port for m in grp.members] == [1]
        with pytest.raises(ValueError, match="no switch-to-switch link"):
            c.set_link("a", "d", False)
    finally:
        c.close()


def test_capacity_change_reweighs_after_detection():
    c, rec = controller(hold_down=0.0)
    try:
        c.set_capacity("c", "d", 400e9)  # the thin long-haul link is upgraded
        c.settle()
        (grp,) = [g for g in c.pushed["a"].groups if g.id == c.pushed["a"].routes[0].group]
        assert {m.port: m.weight for m in grp.members} == {1: 400.0, 2: 400.0}
        assert "a" in rec.pushes
        with pytest.raises(ValueError, match="capacity must be > 0"):
            c.set_capacity("c", "d", 0)
    finally:
        c.close()
