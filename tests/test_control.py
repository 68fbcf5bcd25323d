import pytest

from emu.control.model import Group, NextHop, Route, SwitchTables, TableError
from emu.control.routes import Attachment, FabricGraph, compute_tables
from emu.dataplane.spec import EngineSpec, PortSpec, SpecError, SwitchSpec
from emu.dataplane.tables import GroupState, Lpm, smooth_wrr
from emu.topo import TopologyError, make_topo
from emu.topo.fpf import FPFTopo


def clos() -> FabricGraph:
    """Two leaves, two spines; spine s0 link to l1 is 400G, the rest 100G."""
    g = FabricGraph()
    for n in ("l0", "l1", "s0", "s1"):
        g.add_switch(n)
    g.add_link("l0", 1, "m-l0-1", "s0", 0, "m-s0-0", 100e9)
    g.add_link("l0", 2, "m-l0-2", "s1", 0, "m-s1-0", 100e9)
    g.add_link("l1", 1, "m-l1-1", "s0", 1, "m-s0-1", 400e9)
    g.add_link("l1", 2, "m-l1-2", "s1", 1, "m-s1-1", 100e9)
    return g


def test_leaf_gets_ecmp_over_both_spines_and_spines_a_single_path():
    tables = compute_tables(clos(), [Attachment("10.0.1.2/32", "l1", 0, "h1")])
    (r,) = tables["l0"].routes
    g = next(g for g in tables["l0"].groups if g.id == r.group)
    assert {m.port for m in g.members} == {1, 2}
    s0 = tables["s0"]
    assert s0.groups[s0.routes[0].group].members == (NextHop(1, "m-l1-1", 400.0),)
    l1 = tables["l1"]
    assert l1.groups[l1.routes[0].group].members == (NextHop(0, "h1"),)


def test_failed_link_is_routed_around():
    fabric = clos()
    (link,) = fabric.links_between("l0", "s0")
    link["up"] = False
    tables = compute_tables(fabric, [Attachment("10.0.1.2/32", "l1", 0, "h1")])
    g = tables["l0"].groups[tables["l0"].routes[0].group]
    assert [m.port for m in g.members] == [2]


def test_weighted_slots_follow_weights():
    order = smooth_wrr([3.0, 1.0], 64)
    assert order.count(0) == 48 and order.count(1) == 16
    g = GroupState(Group(0, (NextHop(0, "02:00:00:00:00:01", 3), NextHop(1, "02:00:00:00:00:02", 1)), "spray"),
                   [b"\x02" * 6, b"\x03" * 6])
    picks = [g.pick(0)[0] for _ in range(400)]
    assert picks.count(0) == 300
    g.set_port_state(0, False)
    assert {g.pick(0)[0] for _ in range(10)} == {1}


def test_lpm_prefers_longest():
    t = Lpm(32)
    t.add("10.0.0.0/8", "a")
    t.add("10.1.0.0/16", "b")
    t.add("10.1.2.3/32", "c")
    assert t.lookup(0x0A010203) == "c" and t.lookup(0x0A010204) == "b" and t.lookup(0x0A020000) == "a"
    assert t.lookup(0x0B000000) is None


def test_tables_reject_dangling_group():
    t = SwitchTables(routes=[Route("10.0.0.0/8", 7)])
    with pytest.raises(TableError, match="unknown group 7"):
        t.validate()


def test_spec_json_round_trip_and_bad_peer():
    t = SwitchTables(groups=[Group(0, (NextHop(0, "02:00:00:00:00:09"),))], routes=[Route("10.0.0.2/32", 0)])
    p = PortSpec(index=0, ifname="x", mac="02:00:00:00:00:01", rate_bps=1e9, delay_s=0, peer_kind="host")
    spec = EngineSpec(switches=(SwitchSpec("s", (p,), t),))
    assert EngineSpec.from_json(spec.to_json()) == spec
    bad = PortSpec(index=0, ifname="y", mac="02:00:00:00:00:01", rate_bps=1e9, delay_s=0,
                   peer_kind="switch", peer_switch="nope", peer_port=0)
    with pytest.raises(SpecError, match="does not exist"):
        EngineSpec(switches=(SwitchSpec("s", (bad,)),))


@pytest.mark.parametrize("params,msg", [
    ({"planes": "0"}, "planes must be at least 1"),
    ({"gpus": "1"}, "at least 2 GPUs"),
    ({"gpus": "100", "leaves": "1"}, "radix"),
    ({"rate": "fast"}, "rate"),
    ({"gpus": "x"}, "integer"),
    ({"colour": "red"}, "unknown parameter"),
])
def test_bad_fpf_parameters_fail_before_anything_exists(params, msg):
    with pytest.raises(TopologyError, match=msg):
        make_topo("fpf", params)


def test_fpf_shape():
    topo = make_topo("fpf", {"gpus": "8", "planes": "4"})
    assert len(topo.hosts()) == 8 and len(topo.switches()) == 4 * (2 + 2)
    assert len(topo.links()) == 8 * 4 + 4 * 2 * 2
    assert FPFTopo(gpus=8).uplink_rate == "200G"


def test_tables_to_dict_is_asdict_and_a_bad_prefix_is_refused_every_time():
    """SwitchTables.to_dict is written out for speed: it must equal dataclasses.asdict, and the remembered
    prefix check must refuse a bad prefix however often it is given."""
    import dataclasses

    from emu.control.model import EncapPolicy, MySid

    t = SwitchTables(groups=[Group(0, (NextHop(0, "02:00:00:00:00:09", 2.5), NextHop(3, "02:00:00:00:00:0a")),
                                   mode="spray")],
                     routes=[Route("10.0.0.2/32", 0), Route("fdee::/16", 0)],
                     my_sids=[MySid("fc00::e", "End.X", 0), MySid("fc00::d6", "End.DT6")],
                     encaps=[EncapPolicy("fdee::/16", ("fc00::1", "fc00::2"), "fc00::9")])
    assert t.to_dict() == dataclasses.asdict(t)
    assert SwitchTables.from_dict(t.to_dict()) == t
    for _ in range(2):
        with pytest.raises(TableError, match="route prefix '10.0.0.300/32'"):
            Route("10.0.0.300/32", 0)


def _lookup(tables, addr: str):
    """The members a switch's tables send `addr` to (None: no route), by longest prefix."""
    import ipaddress

    best = None
    for r in tables.routes:
        net = ipaddress.ip_network(r.prefix)
        if ipaddress.ip_address(addr) in net and (best is None or net.prefixlen > best[0].prefixlen):
            best = (net, r.group)
    return None if best is None else next(g.members for g in tables.groups if g.id == best[1])


def test_a_subnet_of_one_switch_is_one_route_elsewhere_and_forwards_as_its_hosts_routes():
    """Leaf l1's hosts share 10.0.1.0/24 and fd00:1::/64: every other switch routes each as one prefix, to the
    same next hops as each host's own route; a subnet with addresses on two leaves (10.0.9.0/24), or holding
    another switch's loopback (10.0.2.0/24, l0's 10.0.2.9), stays a route per host."""
    atts = [Attachment("10.0.1.2/32", "l1", 0, "h1", "10.0.1.0/24"), Attachment("10.0.1.3/32", "l1", 3, "h2", "10.0.1.0/24"),
            Attachment("fd00:1::2/128", "l1", 0, "h1", "fd00:1::/64"), Attachment("fd00:1::3/128", "l1", 3, "h2", "fd00:1::/64"),
            Attachment("10.0.9.2/32", "l1", 4, "h3", "10.0.9.0/24"), Attachment("10.0.9.3/32", "l0", 4, "h4", "10.0.9.0/24"),
            Attachment("10.0.2.2/32", "l1", 5, "h5", "10.0.2.0/24"), Attachment("10.0.2.9/32", "l0"),
            Attachment("10.255.0.1/32", "l1")]
    whole = compute_tables(clos(), atts)
    each = compute_tables(clos(), atts, aggregate=False)
    for sw in ("l0", "l1", "s0", "s1"):
        for a in atts:
            addr = a.prefix.split("/")[0]
            assert _lookup(whole[sw], addr) == _lookup(each[sw], addr), (sw, addr)
    assert {r.prefix for r in whole["s0"].routes} == {"10.0.1.0/24", "fd00:1::/64", "10.0.9.2/32", "10.0.9.3/32",
                                                      "10.0.2.2/32", "10.0.2.9/32", "10.255.0.1/32"}
    assert {r.prefix for r in whole["l1"].routes} >= {"10.0.1.2/32", "10.0.1.3/32"}  # its own hosts, each to its port
    assert len(each["s0"].routes) == len(atts)
