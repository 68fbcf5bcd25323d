"""The `emu` command as users run it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

EMU = [sys.executable, "-m", "emu.cli.main"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout, wherever pytest starts


def emu(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*EMU, *args], capture_output=True, text=True, timeout=timeout)


def test_doctor_reports_every_capability():
    r = emu("doctor", "--json")
    d = json.loads(r.stdout)
    assert set(d) >= {"root", "netns", "veth", "netem", "seg6local", "mininet", "bmv2", "p4c", "tshark"}
    assert all(isinstance(v, bool) for v in d.values())
    # What this process can see for itself must agree with what doctor probed.
    assert d["root"] == (os.geteuid() == 0)
    assert d["mininet"] == (importlib.util.find_spec("mininet") is not None and shutil.which("mnexec") is not None)
    assert d["bmv2"] == (shutil.which("simple_switch") is not None and shutil.which("simple_switch_CLI") is not None)
    assert d["p4c"] == (shutil.which("p4c-bm2-ss") is not None or shutil.which("p4c") is not None)
    assert d["tshark"] == (shutil.which("tshark") is not None)
    if d["root"]:
        assert d["netns"] and d["veth"]  # what every root test here relies on


@pytest.mark.root
def test_bad_topology_parameter_is_one_line_and_creates_nothing(no_leftovers):
    r = emu("up", "fpf", "--planes", "0", "--test", "pingall")
    assert r.returncode != 0
    assert "planes must be at least 1" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_parser_loads_no_fabric_module():
    """Every `emu` command builds the whole parser first: `emu clean`, `emu stats` and the rest start in
    a third of the time when that loads nothing of Mininet, pyroute2 or the fabric (0.5 s -> 0.15 s)."""
    code = ("import sys; from emu.cli.main import parser; parser(); "
            "print(sorted(m for m in ('mininet', 'pyroute2', 'emu.net.switch', 'emu.dataplane.engine') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]


def test_mininet_is_loaded_without_setuptools_where_the_standard_distutils_is_installed():
    """Mininet's one import of distutils went through setuptools' shim (setuptools and pkg_resources:
    0.15 s of every process of ours that builds a fabric); emu's own processes give it the standard
    library's (emu.use_stdlib_distutils, called by the `emu` command)."""
    import sysconfig

    if sys.version_info >= (3, 12) or not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "distutils")):
        pytest.skip("no standard-library distutils here: Mininet gets setuptools' copy, as it must")
    code = ("import json, sys, emu; untouched = 'distutils' not in sys.modules; emu.use_stdlib_distutils(); "
            "import emu.net.switch, mininet.net; print(json.dumps([[m for m in ('setuptools', "
            "'pkg_resources') if m in sys.modules], sys.modules['distutils'].__file__, untouched]))")
    r = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True, text=True,
                       timeout=60)  # and no deprecation warning of it shown to the user
    assert r.returncode == 0, r.stderr[-2000:]
    loaded, where, untouched = json.loads(r.stdout)
    assert loaded == [] and where.startswith(sysconfig.get_paths()["stdlib"]), r.stdout
    assert untouched  # `import emu` alone leaves a user's import state as it was: only emu's own processes ask


@pytest.mark.root
def test_clean_twice_is_harmless():
    assert emu("clean").returncode == 0
    r = emu("clean")
    assert r.returncode == 0 and "nothing to remove" in r.stdout


@pytest.mark.root
@pytest.mark.mininet
def test_up_fpf_pingall_all_planes_zero_loss(no_leftovers):
    r = emu("up", "fpf", "--gpus", "4", "--planes", "2", "--test", "pingall", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["pingall"]["ipv4_loss_pct"] == 0 and out["pingall"]["ipv6_loss_pct"] == 0
    assert out["pingall"]["sent"] == 2 * 4 * 3 * 2  # both families, every pair, both planes
    # A second try hides a first packet lost (to neighbour discovery, say): rare, or something is wrong.
    assert out["pingall"]["retried"] <= out["pingall"]["sent"] // 20, out["pingall"]
    assert out["left_behind"] == []


@pytest.mark.root
@pytest.mark.mininet
def test_mn_custom_runs_the_same_topology(no_leftovers):
    r = subprocess.run(["mn", "--custom", "topologies/fpf.py", "--topo", "fpf,gpus=3,planes=1,leaves=1",
                        "--test", "pingall"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    out = r.stdout + r.stderr
    # Mininet's own pingall line; "0% dropped" alone would also match "100% dropped".
    m = re.search(r"\*\*\* Results: (\d+)% dropped \((\d+)/(\d+) received\)", out)
    assert r.returncode == 0 and m, out
    assert m.group(1) == "0" and m.group(2) == m.group(3) == "6", out  # 3 GPUs: 3 x 2 pings, all answered


@pytest.mark.root
@pytest.mark.mininet
def test_topology_script_runs_as_a_plain_script(no_leftovers):
    r = subprocess.run([sys.executable, "topologies/fpf.py", "--gpus", "2", "--planes", "2", "--leaves", "1",
                        "--test", "pingall"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_stats_table_shows_what_bmv2_does_not_count_as_a_dash():
    from rich.console import Console

    from emu.cli.render import stats_table

    port = {"rx_packets": 12, "rx_bytes": 1200, "tx_packets": 10, "tx_bytes": 15000, "ecn_marked": 3, "pfc_rx": 0}
    stats = {"backend": "bmv2", "dilation": 1000.0, "workers": [], "switches": {"p0l0": {"ports": {"p0l0-eth1": port}}}}
    console = Console(width=200, record=True)
    console.print(stats_table(stats))
    row = next(line for line in console.export_text().splitlines() if "p0l0-eth1" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells == ["p0l0", "p0l0-eth1", "12", "10", "14.6KiB", "-", "3", "-/0", "-", "-"], cells


@pytest.mark.root
@pytest.mark.parametrize(("args", "says"), [
    (["up", "fpf", "--links", "engine", "--test", "pingall"], "--links is for --backend bmv2"),
    (["bench", "link", "--backend", "bmv2"], "measures the native engine"),
    (["bench", "link", "--links", "netem"], "not 'netem'"),
])
def test_link_and_backend_options_out_of_place_are_one_clear_error(args, says, no_leftovers):
    r = emu(*args)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.root
def test_bmv2_links_netem_without_netem_says_use_engine(no_leftovers):
    from emu.backends.bmv2.switch import netem_available

    if netem_available():
        pytest.skip("this kernel has netem: `--links netem` is valid here")
    r = emu("up", "fpf", "--backend", "bmv2", "--links", "netem", "--test", "pingall")
    assert r.returncode != 0 and "use `--links engine`" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.root
def test_bench_collective_on_bmv2_without_the_program_says_make_p4(no_leftovers):
    r = subprocess.run([*EMU, "bench", "collective", "allreduce", "--backend", "bmv2", "--gpus", "2"],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, EMU_BMV2_JSON="/nonexistent/emu-test/fabric.json"))
    assert r.returncode != 0 and "make p4" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.root
def test_scenarios_bmv2_cannot_run_say_what_it_lacks_before_building(no_leftovers):
    if shutil.which("simple_switch") is None or shutil.which("p4c-bm2-ss") is None:
        pytest.skip("needs BMv2 and p4c (README, BMv2 and p4c): without them the backend check refuses first")
    subprocess.run(["make", "p4"], check=True, capture_output=True)
    for name, lack in (("headroom", "headroom"), ("dcqcn", "queue depth")):
        r = emu("scenario", name, "--backend", "bmv2", "--json")
        assert r.returncode == 1 and "cannot run on --backend bmv2" in r.stderr and lack in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


@pytest.mark.root
@pytest.mark.mininet
def test_emu_scenario_defaults_to_auto_dilation_and_says_the_d_it_chose(tmp_path, no_leftovers):
    r = emu("scenario", "fpf-vs-nsf", "--gpus", "4", "--planes", "2", "--json", "--strict", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    chosen = result["dilation_auto"]["chosen"]
    assert result["dilation"] == chosen >= 1000 and result["fidelity"]["ok"] is True
    assert f"dilation auto: D={chosen:g} (" in r.stderr and "Mpps offered" in r.stderr


@pytest.mark.root
@pytest.mark.mininet
def test_emu_scenario_as_a_command_json_no_pfc_and_exit_status(tmp_path, no_leftovers):
    r = emu("scenario", "incast", "--senders", "3", "--bytes", "128KiB", "--no-pfc", "--clock", "wall",
            "--dilation", "10000", "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["scenario"] == "incast" and out["pfc"] is False and out["pfc_frames"] == 0
    assert out["dilation"] == 10000 and "ok" in out["fidelity"]
    assert (tmp_path / "incast-nopfc.json").exists() and (tmp_path / "incast-nopfc.png").exists()
    bad = emu("scenario", "no-such-scenario")
    assert bad.returncode != 0 and "unknown scenario 'no-such-scenario'" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    wrong = emu("scenario", "incast", "--senders", "0")
    assert wrong.returncode != 0 and "senders must be in 1..63" in wrong.stderr and "Traceback" not in wrong.stderr


def test_results_read_in_human_units_and_raw_only_in_json():
    """Issue 13: what a person reads has units (Gb/s, MiB, us, %); the numbers stay raw in --json. Issue 40:
    the verdict first, the figures in a table, and series, traces and long lists only in --json (the
    incast's per-sender series printed 375 entries each in the middle of the terminal)."""
    import io
    import re

    from rich.console import Console

    from emu.cli.render import print_result

    out = io.StringIO()
    print_result({"scenario": "incast", "goodput_fabric_bps": 95.5e9, "planned_bytes": 2 << 20,
                  "paused_fabric_s": 50.3e-6, "delivered_bytes_by_plane": {0: 1 << 20, 1: 512}, "loss_pct": 0.0,
                  "busbw_of_bound": 0.724, "retransmits": 3, "fidelity": {"ok": True}, "rows": list(range(20)),
                  "received_series": {"10.0.0.3": [[0.1, 0.2], [100.0, 99.0]]}, "passed": False,
                  "missing": ["no ping reply in phase policy"]},
                 Console(file=out, width=200))
    text = out.getvalue()
    assert text.splitlines()[0] == "incast: FAILED; missing: no ping reply in phase policy", text
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+) +(.+)$", text, re.M)}
    assert rows["goodput_fabric_bps"] == "95.5Gb/s" and rows["planned_bytes"] == "2MiB", rows
    assert rows["paused_fabric_s"] == "50.3us" and rows["delivered_bytes_by_plane"] == "{0: 1MiB, 1: 512B}", rows
    assert rows["loss_pct"] == "0.0 %" and rows["busbw_of_bound"] == "72.4 %" and rows["retransmits"] == "3", rows
    assert "rows" not in rows and "received_series" not in rows and "10.0.0.3" not in text
    assert "in --json only (series, traces, long lists): rows, received_series" in text
    assert "95500000000" not in text and "fidelity" not in text  # the verdict is its own line, on stderr


def test_bench_help_names_every_collective_it_runs():
    """Issue 39: `emu bench collective --help` did not list alltoall though it ran: the ops are named once."""
    from emu.collectives import OPS

    out = emu("bench", "collective", "--help")
    text = " ".join(out.stdout.split())
    assert out.returncode == 0 and all(op in text for op in OPS) and "alltoall" in OPS, text


@pytest.mark.parametrize("name", sorted(p.stem for p in __import__("pathlib").Path(__file__).parent.glob(
    "data/figures/*.json") if p.stem in __import__("emu.scenarios", fromlist=["SCENARIOS"]).SCENARIOS))
def test_a_scenarios_terminal_table_is_the_figures_its_verdict_is_made_of(name):
    """Issue 40, item 4: each scenario names the figures its verdict reads (`headline`); on a terminal its
    result is those, in their units, and the names of the rest (in --json). Read from the recorded results."""
    import io

    from rich.console import Console

    from emu.cli.render import NOT_THERE, figure_at, print_result
    from emu.scenarios import scenario_class

    result = json.loads(open(os.path.join(os.path.dirname(__file__), "data", "figures", f"{name}.json")).read())
    headline = scenario_class(name).headline
    assert headline and all(figure_at(result, path) is not NOT_THERE for path in headline), name
    out = io.StringIO()
    print_result({**result, "passed": True}, Console(file=out, width=200), headline=headline)
    text = out.getvalue()
    table = text.split("in --json only")[0].splitlines()[2:]  # after the verdict and the header
    rows = [line.split()[0] for line in table if line.strip()]
    assert rows == list(headline), text
    other = [k for k in result if k not in headline and k not in ("fidelity", "passed", "missing", "scenario")]
    assert f"in --json only (the other figures): {', '.join(other)}" in " ".join(text.split()), text


def test_up_help_lists_the_topologys_own_parameters_and_defaults():
    r = emu("up", "fpf", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "fpf parameters:" in text and "Flattened Planar Fabric" in text
    assert "--gpus INT default: 8" in text and "--planes INT default: 8" in text and "--rate STR default: 100G" in text
    assert "--uplink STR default: none" in text
    tahan = " ".join(emu("up", "tahan", "-h").stdout.split())
    assert "--accelerators INT default: from --preset" in tahan and "--preset STR default: current" in tahan
    assert "gpus" not in tahan  # only the named topology's


@pytest.mark.root
@pytest.mark.mininet
def test_a_failing_scenario_verdict_exits_one_so_ci_can_gate_on_it(tmp_path, no_leftovers):
    """One sender cannot congest a port: the incast verdict (PFC must have paused someone) fails."""
    r = emu("scenario", "incast", "--senders", "1", "--bytes", "64KiB", "--json",
            "--out", str(tmp_path))
    out = json.loads(r.stdout)
    assert out["passed"] is False and out["pfc_frames"] == 0 and out["drops_lossless"] == 0, out
    assert r.returncode == 1, r.stderr


@pytest.mark.root
@pytest.mark.mininet
def test_pingall_says_reachability_is_exact_and_what_its_verdict_is_about(no_leftovers):
    """Issue 27, item 11: `make demo` printed "fidelity: NOT OK ... raise --dilation" and then PASSED. A
    pingall's verdict is about the ping times at this D; whether every address answered is exact."""
    r = emu("up", "fpf", "--gpus", "2", "--planes", "1", "--test", "pingall", "--dilation", "100")
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stdout.split())
    assert "reachability is exact; the ping times' fidelity:" in said and "PASSED" in said, said


@pytest.mark.root
@pytest.mark.mininet
def test_emu_scenario_dcqcn_as_the_readme_gives_it(tmp_path, no_leftovers):
    """Issue 27, item 14: the README's `emu scenario dcqcn --json`, on its default clock (fabric): both
    runs deliver every byte, DCQCN keeps the queue over Kmax far less than no control does, the
    verdict is exact, and the plot is written."""
    r = emu("scenario", "dcqcn", "--json", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout)
    assert result["passed"] is True and result["clock"] == "fabric" and result["fidelity"]["ok"] is True
    on, off = result["dcqcn"], result["none"]
    assert on["data_ok"] and off["data_ok"]
    assert on["over_kmax_fraction"] < 0.5 * off["over_kmax_fraction"], (on["over_kmax_fraction"], off["over_kmax_fraction"])
    assert os.path.getsize(tmp_path / "dcqcn.png") > 1000


def test_lab_list_json_is_json_and_a_closed_pipe_is_quiet():
    """`emu lab list --json` printed text; `emu ... | head` printed "[Errno 32] Broken pipe"."""
    r = emu("lab", "list", "--json")
    labs = json.loads(r.stdout)
    assert r.returncode == 0 and {"planes", "metaroce", "ecn-dcqcn"} <= {lab["name"] for lab in labs}
    assert all(lab["title"] for lab in labs)
    p = subprocess.Popen([*EMU, "lab", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line
    assert p.wait(60) in (0, 141) and b"Broken pipe" not in p.stderr.read()
