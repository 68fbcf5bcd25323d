"""Scenarios as classes: typed parameters checked before anything exists, registered by name, built from
the command line, steps apart (topology, run, verdict, plot), the plot drawn from the result alone."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from emu.net.switch import RunSettings
from emu.scenarios import SCENARIOS, run_scenario, scenario_class
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError
from emu.scenarios.incast import Incast
from emu.topo.common import FabricTopo

EMU = [sys.executable, "-m", "emu.cli.main"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_is_a_registered_class_with_typed_parameters_and_its_steps(name):
    cls = scenario_class(name)
    assert issubclass(cls, Scenario) and cls.name == name
    s = cls()  # its defaults are valid
    assert s.load_pps() > 0
    topos = s.topologies()
    assert topos and all(isinstance(t, FabricTopo) for t in topos.values()), topos
    for f in dataclasses.fields(cls):  # every parameter typed, with a default a reader can see
        assert f.type in ("int", "str", "float") and f.default is not dataclasses.MISSING, f
    for step in ("measure", "verdict", "plot"):
        assert getattr(cls, step) is not getattr(Scenario, step), (name, step)


def test_bad_parameters_are_one_clear_error_before_anything_exists():
    with pytest.raises(ScenarioError, match="senders must be in 1..63"):
        Incast(senders=0)
    with pytest.raises(ScenarioError, match="incast: bytes:"):
        Incast(bytes="lots")
    with pytest.raises(ScenarioError, match=r"unknown parameter 'sender'; known: senders, bytes"):
        Incast.from_params({"sender": "3"})
    with pytest.raises(ScenarioError, match="senders must be an integer, got 'x'"):
        Incast.from_params({"senders": "x"})
    s = scenario_class("plane-down").from_params({"planes": "3", "at": "0.5", "bytes": "64KiB"})
    assert (s.planes, s.at, s.as_size("bytes")) == (3, 0.5, 64 << 10)  # converted by the field's type
    with pytest.raises(ScenarioError, match="fpf-vs-nsf: fpf: at most 16 planes"):
        scenario_class("fpf-vs-nsf").from_params({"planes": "17"})  # the topologies' own checks, first


def test_the_cli_lists_the_same_scenarios_and_each_ones_parameters():
    text = subprocess.run([*EMU, "scenario", "--help"], capture_output=True, text=True).stdout
    text = text.replace("-\n", "-")  # argparse wraps a long list at a name's hyphen
    listed = " ".join(text.split()).split("Scenarios: ")[1].split(".")[0].split(", ")
    assert sorted(listed) == sorted(SCENARIOS)
    one = " ".join(subprocess.run([*EMU, "scenario", "plane-down", "--help"], capture_output=True,
                                  text=True).stdout.split())
    assert "plane-down parameters:" in one and "--planes INT default: 4" in one and "--at FLOAT default: 0.4" in one


@pytest.mark.root
@pytest.mark.mininet
def test_the_plot_is_drawn_from_the_saved_result_alone(tmp_path, no_leftovers):
    r = run_scenario("incast", {"senders": "2", "bytes": "64KiB"}, RunSettings(buffer_per_port=256 << 10),
                     dilation=10000, out_dir=str(tmp_path), plot=False)
    assert not (tmp_path / "incast-pfc.png").exists() and "plot" not in r  # plotting is optional
    saved = json.loads((tmp_path / "incast-pfc.json").read_text())
    assert saved["parameters"] == {"senders": 2, "bytes": "64KiB", "size": 1400, "rate": "100G", "leaves": 2,
                                   "spines": 2}
    assert len(saved["received_series"]) == 2  # one per sender
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    Incast(senders=2, bytes="64KiB").plot(saved, ax)  # no fabric, no run: the JSON is enough
    assert len(ax.collections) == 2 and "Incast 2:1, PFC on" in ax.get_title()  # each sender's share, stacked
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == sorted(saved["received_series"])
    plt.close(fig)
    r = subprocess.run([*EMU, "scenario", "incast", "--senders", "2", "--bytes", "64KiB", "--dilation", "10000",
                        "--no-plot", "--out", str(tmp_path / "cli"), "--json"], capture_output=True, text=True)
    assert r.returncode == (0 if json.loads(r.stdout)["passed"] else 1), r.stderr  # the exit says the verdict
    assert (tmp_path / "cli" / "incast-pfc.json").exists() and not (tmp_path / "cli" / "incast-pfc.png").exists()


def test_a_measurement_that_got_nothing_fails_the_verdict_and_says_what_was_missing():
    """srv6-te at D = 100 000 got no ping reply back and its verdict compared None with None (a traceback
    after 3 min 20 s): a phase with no reply is now a failed verdict naming it."""
    from emu.scenarios.srv6_te import Srv6Te

    phase = {"received_bytes": 1000, "planned_bytes": 1000, "forwarded_by_router": {}}
    result = {"routers_crossed": {"shortest": ["r1"], "policy": ["r3", "r4"], "restored": ["r1"]},
              "phases": [{**phase, "phase": "shortest", "rtt_fabric_s": 1e-4},
                         {**phase, "phase": "policy", "rtt_fabric_s": None},
                         {**phase, "phase": "restored", "rtt_fabric_s": 1e-4}]}
    s = Srv6Te()
    assert s.missing(result) == ["no ping reply in phase policy"] and s.verdict(result) is False
    result["phases"][1]["rtt_fabric_s"] = 3e-4
    assert s.missing(result) == [] and s.verdict(result) is True


class _LongLine(FabricTopo):
    """Two hosts 100 km apart: a round trip of a millisecond of fabric time."""

    def build(self, km: int = 100) -> None:
        self.addFabricSwitch("s0")
        self.addFabricSwitch("s1")
        self.addFabricLink("s0", "s1", rate="100G", cable=f"{km}km")
        self.addHost("h0")
        self.addHost("h1")
        self.addHostLink("h0", "s0", rate="100G")
        self.addHostLink("h1", "s1", rate="100G")


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.long
def test_a_ping_waits_for_as_long_as_the_slowest_path_takes_at_this_d(no_leftovers):
    """At D = 5000 a 1 ms fabric round trip is 5 s of wall time: past the 2 s the scenarios' pings used to
    wait (-W2). net.round_trips waits as the fabric's slowest path takes at this D, and gets every reply."""
    from emu import FabricNet

    with FabricNet(_LongLine(), dilation=5000) as net:
        assert net.kernel_wait_s(2 * net.rtt_bound_s()) > 10.0
        rtts, ttls = net.round_trips("h0", net.get("h1").IP(), count=2, family=4)
    assert len(rtts) == 2 and all(1.0e-3 <= r < 1.3e-3 for r in rtts), rtts
    assert ttls and all(t == 62 for t in ttls)  # two switches on the way
