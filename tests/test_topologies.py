"""Every topology comes up, answers pingall on IPv4 and IPv6, and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from emu.topo import TopologyError, make_topo

EMU = [sys.executable, "-m", "emu.cli.main"]

SMALL = {
    "fpf": ["--gpus", "3", "--planes", "2"],
    "nsf": ["--gpus", "4", "--gpus-per-rack", "1", "--racks-per-pod", "2", "--fsw", "2", "--spines", "1"],
    "tahan": ["--accelerators", "3", "--switch-count", "2", "--ports-per-switch", "2"],
    "bag": ["--regions", "2", "--buildings", "2", "--hosts-per-leaf", "1", "--bag-rates", "400G,100G"],
    "rbb": ["--routers", "4", "--campuses", "2", "--hosts-per-campus", "2"],
}


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.parametrize("name", sorted(SMALL))
def test_pingall_every_family_every_plane(name, no_leftovers):
    r = subprocess.run([*EMU, "up", name, *SMALL[name], "--test", "pingall", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["pingall"]["ipv4_loss_pct"] == 0 and out["pingall"]["ipv6_loss_pct"] == 0
    assert out["pingall"]["sent"] > 0 and out["left_behind"] == []
    assert out["pingall"]["retried"] <= out["pingall"]["sent"] // 20, out["pingall"]  # second tries stay rare


def test_shapes():
    nsf = make_topo("nsf", {"gpus": "8"})
    assert len(nsf.hosts()) == 8 and sum(1 for s in nsf.switches() if s.startswith("rsw")) == 4
    tahan = make_topo("tahan", {})
    assert len(tahan.hosts()) == 16 and len(tahan.switches()) == 4 and len(tahan.links()) == 16 * 4 * 2
    nxt = make_topo("tahan", {"preset": "next"})
    assert len(nxt.hosts()) == 72 and len(nxt.switches()) == 8 and len(nxt.links()) == 72 * 8 * 3
    bag = make_topo("bag", {"regions": "3"})
    assert sum(1 for s in bag.switches() if s.startswith("bag")) == 6
    rbb = make_topo("rbb", {"routers": "6", "campuses": "3"})
    assert {"pe0", "pe1", "pe2", "r5"} <= set(rbb.switches())


@pytest.mark.parametrize("name,params,msg", [
    ("fpf", {"planes": "0"}, "planes must be at least 1"),
    ("nsf", {"gpus": "1"}, "at least 2 GPUs"),
    ("tahan", {"accelerators": "40"}, "switch ports"),
    ("tahan", {"preset": "huge"}, "preset"),
    ("bag", {"distance": "-5km"}, "negative"),
    ("bag", {"bag_rates": "400G,fast"}, "rate"),
    ("rbb", {"campuses": "1"}, "at least 2 campuses"),
    ("rbb", {"campuses": "6", "routers": "3"}, "backbone routers"),
    ("torus", {}, "unknown topology"),
])
def test_bad_parameters_one_clear_error(name, params, msg):
    with pytest.raises(TopologyError, match=msg):
        make_topo(name, params)


@pytest.mark.parametrize("name, params", [
    ("fpf", {}), ("fpf", {"gpus": "16", "planes": "8", "leaves": "4", "spines": "3"}), ("fpf", {"leaves": "1"}),
    ("nsf", {"gpus": "13", "racks-per-pod": "3"}), ("bag", {"regions": "3", "buildings": "2", "bags": "2"}),
    ("tahan", {"preset": "next"}), ("rbb", {"routers": "7", "campuses": "3", "hosts-per-campus": "2"}),
])
def test_the_size_reckoned_before_building_is_the_size_built(name, params):
    topo = make_topo(name, params)
    assert topo.links_needed() == len(topo.links())


def test_a_fabric_too_big_for_one_machine_is_refused_before_it_is_described():
    import time

    t0 = time.monotonic()
    with pytest.raises(TopologyError, match="more than one machine"):
        make_topo("fpf", {"gpus": "100000", "leaves": "200", "radix": "100000"})
    assert time.monotonic() - t0 < 1.0  # not 800 000 links described first


def test_emu_topologies_lists_every_parameter_with_its_default():
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "emu.cli.main", "topologies", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listed = {d["name"]: d for d in json.loads(r.stdout)}
    assert set(listed) == {"fpf", "nsf", "bag", "tahan", "rbb"}
    fpf = {p["option"]: p for p in listed["fpf"]["parameters"]}
    assert fpf["--gpus"] == {"option": "--gpus", "type": "int", "default": 8}
    assert fpf["--host-cable"]["default"] == "2m" and "Planar" in listed["fpf"]["shape"]
    # Every option listed is one make_topo takes.
    for name, d in listed.items():
        for p in d["parameters"]:
            if p["default"] is not None:
                make_topo(name, {p["option"][2:]: str(p["default"])})
