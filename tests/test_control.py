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
    assert t.to_dict(compact=True)["routes"] == {"prefixes": ["10.0.0.2/32", "fdee::/16"], "groups": [0, 0]}
    assert SwitchTables.from_dict(t.to_dict(compact=True)) == t
    with pytest.raises(TableError, match="route prefix '10.0.0.300/32'"):
        SwitchTables.from_dict({**t.to_dict(), "routes": {"prefixes": ["10.0.0.300/32"], "groups": [0]}})
    with pytest.raises(TableError, match="2 route prefixes for 1 groups"):
        SwitchTables.from_dict({**t.to_dict(), "routes": {"prefixes": ["10.0.0.2/32", "fdee::/16"], "groups": [0]}})
    port = PortSpec(index=1, ifname="h-eth1", mac="02:00:00:00:00:01", rate_bps=1e11, delay_s=1e-6, peer_kind="host",
                    peer_mac="02:00:00:00:00:02", ipv4=("10.0.0.1/24",), ipv6=("fd00::1/64",), kernel=False)
    assert port.to_dict() == dataclasses.asdict(port)
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


def _reference_tables(fabric: FabricGraph, attachments: list[Attachment], *, spray: bool = False,
                      aggregate: bool = True) -> dict[str, SwitchTables]:
    """compute_tables as it was written before it was made fast (session 11): networkx's breadth-first search
    from each destination switch, every switch's links scanned for each. The fast one must give exactly
    these tables: the same groups, ids, members, weights and routes, in the same order."""
    import dataclasses

    import networkx as nx

    from emu.control.routes import remote_prefixes

    g = fabric.live()
    tables = {n: SwitchTables() for n in g.nodes}
    group_ids: dict[str, dict[tuple, int]] = {n: {} for n in g.nodes}
    mode = "spray" if spray else "hash"
    adj = {n: [(nbr, d["ports"][n][0], d["ports"][nbr][1], d["rate"]) for _, nbr, d in g.edges(n, data=True)]
           for n in g.nodes}

    def group_for(sw, hops, gmode):
        ids = group_ids[sw]
        gid = ids.get((gmode, hops))
        if gid is None:
            gid = ids[(gmode, hops)] = len(ids)
            tables[sw].groups.append(Group(id=gid, members=tuple(NextHop(*h) for h in hops), mode=gmode))
        return gid

    by_switch: dict[str, list[Attachment]] = {}
    for a in attachments:
        by_switch.setdefault(a.switch, []).append(a)
    remote = remote_prefixes(attachments) if aggregate else \
        {sw: [a.prefix for a in atts] for sw, atts in by_switch.items()}
    for target, atts in by_switch.items():
        if target not in g:
            continue
        dist = nx.single_source_shortest_path_length(g, target)
        cap = {target: float("inf")}
        routes = [Route(prefix, 0) for prefix in remote[target]]
        for sw, d in sorted(dist.items(), key=lambda kv: kv[1]):
            if sw == target:
                for a in atts:
                    if a.port >= 0:
                        tables[sw].routes.append(Route(a.prefix, group_for(sw, ((a.port, a.mac, 1.0),), "hash")))
                continue
            by_nbr: dict[str, list] = {}
            for nbr, port, peer_mac, rate in adj[sw]:
                if dist.get(nbr) == d - 1:
                    by_nbr.setdefault(nbr, []).append((port, peer_mac, rate))
            members, total = [], 0.0
            for nbr, links in by_nbr.items():
                rate = sum(r for _, _, r in links)
                usable = min(rate, cap[nbr])
                total += usable
                members += [(port, mac, round(r * usable / rate / 1e9, 3)) for port, mac, r in links]
            cap[sw] = total
            members.sort(key=lambda m: m[0])
            gid = group_for(sw, tuple(members), mode)
            tables[sw].routes.extend(dataclasses.replace(r, group=gid) for r in routes)
    return tables


def _same_tables(fabric: FabricGraph, attachments: list[Attachment]) -> int:
    """Assert the fast tables equal the reference's, every way they are asked for; the routes compared."""
    n = 0
    for spray in (False, True):
        for aggregate in (True, False):
            fast = compute_tables(fabric, attachments, spray=spray, aggregate=aggregate)
            ref = _reference_tables(fabric, attachments, spray=spray, aggregate=aggregate)
            assert list(fast) == list(ref)
            for sw in ref:
                assert fast[sw].to_dict() == ref[sw].to_dict(), (sw, spray, aggregate)
                n += len(ref[sw].routes)
    return n


def test_tables_are_the_reference_tables_on_meshes_with_parallel_links_thin_paths_and_failures():
    """Not only a Clos: a three-tier fabric with parallel links of unequal rates, a thin long-haul link (its
    capacity capping the paths through it), a ring, a link down and a switch cut off; each destination's
    subnet, loopbacks and per-host routes. Bit for bit the reference's, group ids and route order included."""
    import random

    rng = random.Random(11)
    g = FabricGraph()
    names = [f"t{i}" for i in range(4)] + [f"a{i}" for i in range(4)] + [f"c{i}" for i in range(2)] + \
        ["r0", "r1", "r2", "lonely"]
    for n in names:
        g.add_switch(n)
    port = {n: 10 for n in names}

    def link(a: str, b: str, rate: float) -> None:
        g.add_link(a, port[a], f"m-{a}-{port[a]}", b, port[b], f"m-{b}-{port[b]}", rate)
        port[a] += 1
        port[b] += 1

    for i in range(4):
        for j in range(4):
            if (i < 2) == (j < 2):  # two pods of two tors and two aggs
                link(f"t{i}", f"a{j}", rng.choice((100e9, 200e9, 400e9)))
        for c in ("c0", "c1"):
            link(f"a{i}", c, 400e9)
    link("a0", "c0", 100e9)  # a parallel link of another rate
    link("c1", "r0", 10e9)  # a thin long haul to a ring
    link("r0", "r1", 400e9)
    link("r1", "r2", 400e9)
    link("r2", "r0", 100e9)
    (down,) = g.links_between("t3", "a3")
    down["up"] = False
    atts = []
    for k, sw in enumerate(("t0", "t1", "t2", "t3", "r1", "r2", "lonely")):
        atts.append(Attachment(f"10.255.0.{k}/32", sw))
        for h in range(3):
            atts.append(Attachment(f"10.0.{k}.{h + 2}/32", sw, h, f"h{k}-{h}", f"10.0.{k}.0/24"))
            atts.append(Attachment(f"fd00:{k}::{h + 2}/128", sw, h, f"h{k}-{h}", f"fd00:{k}::/64"))
    atts.append(Attachment("10.0.1.9/32", "t2", 7, "stray", "10.0.1.0/24"))  # t1's subnet, on another switch
    atts.append(Attachment("10.9.9.9/32", "gone", 0, "x"))  # on a switch not in the fabric
    assert _same_tables(g, atts) > 0
    assert _same_tables(clos(), [Attachment("10.0.1.2/32", "l1", 0, "h1", "10.0.1.0/24")]) > 0


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.parametrize("name, params", [("fpf", {"gpus": "16", "planes": "2"}), ("tahan", {}), ("bag", {}),
                                          ("fpf", {"gpus": "64", "leaves": "4", "spines": "4", "planes": "1"})])
def test_a_built_fabrics_tables_are_the_reference_tables(name, params, no_leftovers):
    """The graph and attachments build_spec reads from a fabric as built (without the hosts' kernels, so
    nothing is made in the kernel): its tables are the reference's, every way they are asked for."""
    from emu.net.fabric import FabricNet
    from emu.net.switch import RunSettings, build_spec

    settings = RunSettings(kernel=False, clock="fabric")
    net = FabricNet(make_topo(name, params), settings=settings)
    try:
        built = build_spec(tuple(net.switches), settings)
    finally:
        net.stop()
    assert _same_tables(built.graph, built.attachments) > len(built.attachments)
