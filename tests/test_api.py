"""The public API, as a student's or a researcher's script uses it: `from emu import ...`."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from emu import BAGTopo, FabricNet, FabricTopo, FPFTopo, TahanTopo, TopologyError


def test_the_public_names_import_without_pulling_mininet_into_the_low_layers():
    code = ("import sys, emu.units, emu.dataplane.spec; assert 'mininet' not in sys.modules, 'mininet loaded'; "
            "from emu import FabricNet, FPFTopo, NSFTopo, BAGTopo, TahanTopo, RBBTopo, FabricTopo; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_topologies_have_typed_keyword_parameters_checked_before_anything_exists():
    sig = inspect.signature(FPFTopo)
    assert list(sig.parameters)[:3] == ["gpus", "planes", "leaves"]
    assert sig.parameters["gpus"].default == 8 and sig.parameters["rate"].default == "100G"
    with pytest.raises(TopologyError, match="radix"):
        FPFTopo(gpus=8, leaves=1, radix=4)
    with pytest.raises(TopologyError, match="rate"):
        BAGTopo(rate="fast")
    # A preset fills what is left out; what is given wins.
    assert TahanTopo(preset="next").accelerators == 72
    assert len(TahanTopo(preset="next", switch_count=2).switches()) == 2


def test_a_parameter_named_like_a_topo_method_is_refused_when_the_class_is_written():
    from dataclasses import dataclass

    with pytest.raises(TypeError, match="hosts"):
        @dataclass
        class Bad(FabricTopo):
            hosts: int = 2


@pytest.mark.root
@pytest.mark.mininet
def test_ten_lines_ping_every_plane_then_fail_one(no_leftovers):
    with FabricNet(FPFTopo(gpus=2, planes=2, leaves=1), dilation=2000) as net:
        assert net.pingall_planes().loss == 0
        net.fail(plane=1)
        gpu0 = net.get("gpu0")
        assert " 0% packet loss" in gpu0.cmd("ping -c2 -i0.1 -W1 10.0.0.3")  # plane 0 carries on
        assert "100% packet loss" in gpu0.cmd("ping -c2 -i0.1 -W1 10.1.0.3")  # plane 1 is down
        port = net.stats().port("p1l0", "p1l0-eth1")  # gpu0's port on plane 1: its pings died there
        assert not port.up and port.drop_reasons["link_down"] >= 2 and port.drops >= 2, port
        net.restore(plane=1)
        assert " 0% packet loss" in gpu0.cmd("ping -c2 -i0.1 -W1 10.1.0.3")
        with pytest.raises(ValueError, match="exactly one"):
            net.fail(plane=0, switch="p0l0")
        w = net.roce.write("gpu0", "gpu1", nbytes=1 << 20)
        assert w.data_ok and w.nbytes == 1 << 20 and w.bw_fabric_bps > 0
        assert len(w.planes) == 2 and all(p["tx_bytes"] > 0 for p in w.planes)  # sprayed over both planes


class Line(FabricTopo):
    """A student's fabric in one build(): h0 - s0 - s1 - h1, addresses from the automatic plan."""

    def build(self, length: int = 2) -> None:
        for i in range(length):
            self.addFabricSwitch(f"s{i}")
            if i:
                self.addFabricLink(f"s{i - 1}", f"s{i}", rate="100G", cable="1km")
        self.addHost("h0")
        self.addHost("h1")
        self.addHostLink("h0", "s0", rate="100G")
        self.addHostLink("h1", f"s{length - 1}", rate="100G")


@pytest.mark.root
@pytest.mark.mininet
def test_a_new_fabric_in_one_small_build_routes_and_leaves_nothing_on_an_exception(no_leftovers):
    with pytest.raises(RuntimeError, match="on purpose"):
        with FabricNet(Line(length=3), dilation=2000) as net:
            r = net.pingall_planes()
            assert (r.sent, r.received) == (2, 2), r
            r6 = net.pingall_planes(6)
            assert (r6.sent, r6.received) == (2, 2), r6
            raise RuntimeError("on purpose: the fabric must still be torn down")


@pytest.mark.root
@pytest.mark.mininet
def test_a_scenario_from_python_as_the_readme_shows(tmp_path, no_leftovers):
    from emu import Incast, RunSettings, Scenario

    assert issubclass(Incast, Scenario) and list(inspect.signature(Incast).parameters)[:2] == ["senders", "bytes"]
    r = Incast(senders=5, bytes="512KiB").run(RunSettings(dilation=10_000, buffer_per_port=256 << 10), str(tmp_path))
    assert r["passed"] and r["drops_lossless"] == 0 and r["pfc_frames"] > 0, r
    assert (tmp_path / "incast-pfc.json").exists() and (tmp_path / "incast-pfc.png").stat().st_size > 0
