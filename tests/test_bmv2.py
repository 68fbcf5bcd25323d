"""The BMv2 backend: clear errors without the tools; the fabric on simple_switch where they exist."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import pytest

from emu.backends.bmv2.switch import Bmv2Error, Bmv2Process

HAVE_BMV2 = shutil.which("simple_switch") is not None and shutil.which("simple_switch_CLI") is not None
HAVE_P4C = shutil.which("p4c-bm2-ss") is not None


def test_missing_program_says_make_p4(tmp_path):
    with pytest.raises(Bmv2Error, match="make p4"):
        Bmv2Process("s1", [], 19090, json_path=str(tmp_path / "nope.json")).check()


def test_invalid_json_is_named(tmp_path):
    bad = tmp_path / "fabric.json"
    bad.write_text("{ not json")
    with pytest.raises(Bmv2Error, match="not valid JSON"):
        Bmv2Process("s1", [], 19091, json_path=str(bad)).check()


def test_thrift_port_in_use_is_named(tmp_path):
    ok = tmp_path / "fabric.json"
    ok.write_text(json.dumps({}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(Bmv2Error, match=f"Thrift port {port} is already in use"):
            Bmv2Process("s1", [], port, json_path=str(ok)).check()


@pytest.mark.skipif(HAVE_BMV2, reason="BMv2 is installed: the missing-binary error cannot be shown")
def test_missing_binary_says_what_to_install(tmp_path):
    ok = tmp_path / "fabric.json"
    ok.write_text(json.dumps({}))
    with pytest.raises(Bmv2Error, match="simple_switch not found: install BMv2"):
        Bmv2Process("s1", [], 19092, json_path=str(ok)).check()


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.skipif(not (HAVE_BMV2 and HAVE_P4C), reason="needs BMv2 (simple_switch) and p4c, not installable here")
def test_fpf_two_planes_pingall_on_bmv2(no_leftovers):
    subprocess.run(["make", "p4"], check=True)
    r = subprocess.run([sys.executable, "-m", "emu.cli.main", "up", "fpf", "--gpus", "3", "--planes", "2",
                        "--backend", "bmv2", "--test", "pingall", "--json"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
