"""Scenarios checked against the mechanism they claim: switch it off and the result must change."""

from __future__ import annotations

import pytest

from emu.net.switch import RunSettings
from emu.scenarios import run_scenario

pytestmark = [pytest.mark.root, pytest.mark.mininet]

PARAMS = {"senders": "5", "bytes": "512KiB"}


def test_incast_pfc_is_what_makes_it_lossless(tmp_path, no_leftovers):
    on = run_scenario("incast", PARAMS, RunSettings(dilation=10000, pfc=True, buffer_per_port=256 << 10), out_dir=str(tmp_path))
    off = run_scenario("incast", PARAMS, RunSettings(dilation=10000, pfc=False, buffer_per_port=256 << 10), out_dir=str(tmp_path))
    assert on["drops_lossless"] == 0 and on["pfc_frames"] > 0
    assert on["delivered_bytes"] == on["offered_bytes"] > 0
    assert on["passed"]
    assert off["drops_lossless"] > 0 and off["pfc_frames"] == 0
    assert off["delivered_bytes"] < off["offered_bytes"]
    assert on["ecn_marked"] > 0  # the congested queue passed Kmin
    assert (tmp_path / "incast-pfc.png").stat().st_size > 0
