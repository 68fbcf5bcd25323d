"""One fabric over several machines (issue 24): where each node goes, and the namespace machines the
cluster's tests run on."""

from __future__ import annotations

import pytest

from emu.cluster.placement import PlacementError, place
from emu.topo import make_topo


def test_bag_is_split_at_its_long_haul_links_one_region_a_machine():
    p = place(make_topo("bag", {}), ["m1", "m2"])
    assert p.by == "length"
    assert {n[1] for n in p.nodes_on("m1") if n.startswith("b") and not n.startswith("bag")} == {"0"}
    assert {n[1] for n in p.nodes_on("m2") if n.startswith("b") and not n.startswith("bag")} == {"1"}
    assert p.cut and all(d == pytest.approx(250e-6) for _, _, d in p.cut)  # 50 km each: the lookahead
    assert p.lookahead_s == pytest.approx(250e-6)
    one_region = place(make_topo("bag", {"regions": "1", "buildings": "2"}), ["m1", "m2"])
    assert {n[:3] for n in one_region.nodes_on("m1") if n[:2] == "b0"} != {n[:3] for n in one_region.nodes_on("m2")
                                                                           if n[:2] == "b0"}  # buildings apart
    assert one_region.lookahead_s == pytest.approx(10e-6)  # 2 km


def test_fpf_is_split_by_its_leaf_groups_where_cables_differ_else_by_planes():
    """Two leaves a plane: the 100 m leaf-spine cables part the GPUs under leaf 0 from those under leaf 1
    (a lookahead of 0.5 us, fifty times the host cables'); one leaf a plane: planes 0-3 and 4-7."""
    racks = place(make_topo("fpf", {"gpus": "4", "planes": "8", "leaves": "2"}), ["m1", "m2"])
    assert racks.by == "length" and racks.lookahead_s == pytest.approx(0.5e-6)
    assert {n for n in racks.nodes_on("m1") if n.startswith("gpu")} == {"gpu0", "gpu1"}
    p = place(make_topo("fpf", {"gpus": "4", "planes": "8", "leaves": "1"}), ["m1", "m2"])
    assert p.by == "shard"
    planes = {m: {int(n[1]) for n in p.nodes_on(m) if n.startswith("p")} for m in ("m1", "m2")}
    assert planes == {"m1": {0, 1, 2, 3}, "m2": {4, 5, 6, 7}}
    assert len([n for n in p.nodes_on("m1") if n.startswith("gpu")]) == 2  # balanced
    assert all(a.startswith("gpu") or b.startswith("gpu") for a, b, _ in p.cut)  # only host links cross


def test_a_given_placement_is_checked_and_an_impossible_split_is_one_clear_error():
    topo = make_topo("fpf", {"gpus": "2", "planes": "1", "leaves": "1"})
    given = dict.fromkeys(topo.nodes(), "m1")
    assert place(topo, ["m1", "m2"], given).cut == []
    with pytest.raises(PlacementError, match="unknown machines"):
        place(topo, ["m1"], {**given, "gpu0": "m9"})
    with pytest.raises(PlacementError, match="unplaced nodes"):
        place(topo, ["m1"], {n: "m1" for n in given if n != "gpu1"})
    with pytest.raises(PlacementError, match="1 switch group"):
        place(topo, ["m1", "m2"])  # one plane, one shard, every cable alike
    with pytest.raises(PlacementError, match="distinct"):
        place(topo, ["m1", "m1"])
