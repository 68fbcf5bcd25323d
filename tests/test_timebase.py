"""One clock, chosen once (issue 38): the timebase owns the choice, and nothing above it asks."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from emu.clock import ClockKind
from emu.dataplane.spec import EngineSpec, SpecError
from emu.net.switch import RunSettings
from emu.net.timebase import FabricTime, Timebase, WallTime, clock_label

ROOT = Path(__file__).resolve().parent.parent
CLOCK_NAMES = {"fabric", "wall"}
# Where a module above the timebase may still ask, each with its reason (docs/architecture.md): none is left
# (trimming asked whether the clock was exact; what it needs to know is where the endpoints run).
ALLOWED: set[tuple[str, str]] = set()


def _asks_the_clock(tree: ast.AST) -> list[tuple[int, str]]:
    """Comparisons with a clock's name, and reads of `.clock`: each a branch on the clock."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in CLOCK_NAMES:
                    found.append((node.lineno, repr(side.value)))
        elif isinstance(node, ast.Attribute) and node.attr == "clock":
            found.append((node.lineno, node.attr))
    return found


def _modules() -> list[Path]:
    return sorted([*ROOT.glob("emu/scenarios/*.py"), *ROOT.glob("emu/bench/*.py"), *ROOT.glob("labs/*/check.py"),
                   *ROOT.glob("labs/*/solution/*.py")])


def test_no_scenario_bench_or_lab_asks_which_clock_it_is_on():
    asked = {}
    for path in _modules():
        rel = str(path.relative_to(ROOT))
        hits = [h for h in _asks_the_clock(ast.parse(path.read_text())) if (rel, h[1]) not in ALLOWED]
        if hits:
            asked[rel] = hits
    assert len(_modules()) > 20  # the globs found the modules
    assert not asked, f"branches on the clock above the timebase: {asked}"


def test_the_check_finds_a_branch_where_there_is_one():
    code = 'def f(settings):\n    if settings.clock == "fabric":\n        return 1\n    return net.timebase.name != "wall"\n'
    assert sorted(_asks_the_clock(ast.parse(code))) == [(2, "'fabric'"), (2, "clock"), (4, "'wall'")]


def test_the_settings_choose_the_timebase_once_and_it_names_the_engines_loop():
    assert Timebase.of(RunSettings(clock="fabric")) is FabricTime
    assert Timebase.of(RunSettings(clock="wall")) is WallTime
    assert (FabricTime.clock, WallTime.clock) == (ClockKind.FABRIC, ClockKind.WALL)
    assert not FabricTime.clock.paced and WallTime.clock.paced


def test_a_clocks_name_becomes_its_kind_once_where_it_is_given():
    """RunSettings and EngineSpec make a name the kind (a record read back gives the name); a wrong name
    is one clear error; the kind still reads as its name in results and JSON."""
    settings = RunSettings(clock="fabric")
    assert settings.clock is ClockKind.FABRIC
    spec = EngineSpec(switches=(), dilation=1.0, clock="fabric")
    assert spec.clock is ClockKind.FABRIC and not spec.paced
    assert EngineSpec.from_json(spec.to_json()).clock is ClockKind.FABRIC
    assert json.loads(json.dumps({"clock": ClockKind.WALL})) == {"clock": "wall"}
    with pytest.raises(ValueError, match="unknown clock 'sundial'"):
        RunSettings(clock="sundial")
    with pytest.raises(SpecError, match="unknown clock 'sundial'"):
        EngineSpec(switches=(), clock="sundial")


def _compares_a_clock_name(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
            and any(isinstance(side, ast.Constant) and side.value in CLOCK_NAMES
                    for side in (node.left, *node.comparators))]


def test_no_code_compares_a_clocks_name_past_the_parsing():
    """Issue 50, item 6: past argument parsing the clock is a ClockKind, asked `.paced` or compared by
    identity; a comparison with "fabric" or "wall" anywhere in emu/ is a second, untyped decision."""
    found = {str(path.relative_to(ROOT)): lines for path in sorted(ROOT.glob("emu/**/*.py"))
             if (lines := _compares_a_clock_name(ast.parse(path.read_text())))}
    assert not found, f"comparisons with a clock's name: {found}"
    assert _compares_a_clock_name(ast.parse('if x.clock != "wall": pass')) == [1]


def test_what_each_clock_admits():
    FabricTime.admit("x", engine=True, kernel=False)
    WallTime.admit("x", engine=False, kernel=True)
    with pytest.raises(ValueError, match="x runs on the wall clock"):
        FabricTime.admit("x", engine=False, kernel=True)
    with pytest.raises(ValueError, match="x measures on the fabric clock only: --clock fabric"):
        WallTime.admit("x", engine=True, kernel=False)


def test_auto_dilation_searches_on_the_wall_clock_only():
    calls: list[object] = []

    def at(d: float) -> str:
        calls.append(d)
        return "at"

    def auto() -> str:
        calls.append("auto")
        return "auto"

    assert FabricTime.run_at("auto", at, auto, default=1000.0) == "at" and calls == [1000.0]
    assert FabricTime.run_at(None, at, auto, default=7.0) == "at" and calls[-1] == 7.0
    assert WallTime.run_at("auto", at, auto, default=1000.0) == "auto" and calls[-1] == "auto"
    assert WallTime.run_at(20000, at, auto, default=1000.0) == "at" and calls[-1] == 20000.0


def test_a_result_says_its_clock_and_a_plot_names_it():
    fabric = FabricTime.result_fields(RunSettings(clock="fabric", dilation=5000.0, workers=2))
    assert fabric == {"clock": "fabric", "dilation": 1.0, "workers": 2}
    wall = WallTime.result_fields(RunSettings(clock="wall", dilation=5000.0))
    assert wall == {"clock": "wall", "dilation": 5000.0}
    assert clock_label(fabric) == "fabric clock" and clock_label(wall) == "D=5000"
    assert clock_label({**fabric, "seed": 3}, long=True) == "the fabric clock (exact; seed 3)"


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.long
def test_the_same_flows_on_either_clock_come_back_in_fabric_units(no_leftovers):
    """`net.traffic` on both clocks: a receiver's times are fabric seconds on the wall clock too (D applied
    once: in emu.net.flows for processes in the hosts, in the job's loop time inside the engine), so the
    same 512 KiB at 100 Gb/s takes about 43 us on every run, and a plane failed half-way through is
    failed at about half that, on the receiver's clock. The wall clock runs the flows inside its one
    worker (the default), or split over two, a part on each (the hosts each whole on one, the sender's
    and receiver's parts joined by the channel between the workers); processes in the hosts are BMv2's
    (tests/test_bmv2.py)."""
    from emu import FabricNet, Flow, FPFTopo

    out = {}
    for clock, workers in (("fabric", 0), ("wall", 2), ("inside", 1)):
        with FabricNet(FPFTopo(gpus=2, planes=2, leaves=1), clock="fabric" if clock == "fabric" else "wall",
                       dilation=20_000, workers=workers) as net:
            flows = [Flow("gpu0", "gpu1", f"10.{p}.0.3", 9300, 512 << 10, 100e9) for p in range(2)]
            traffic = net.traffic(flows, fail_plane=(1, 0.5))
            sent, got = traffic.wait()
            rx = got[("gpu1", 9300, False)]
            assert traffic.failed_at_s is not None and rx["first_s"] is not None
            out[clock] = {"duration_s": rx["duration_s"], "failed_after_s": traffic.failed_at_s - rx["first_s"],
                          "plane0": rx["by_source"].get("10.0.0.2", 0), "plane1": rx["by_source"].get("10.1.0.2", 0)}
            fid = net.verdict(rate_bps=100e9, frame_bytes=1442, kernel_frames=traffic.kernel_frames, senders=sent)
            out[clock]["judged"] = sorted(p["name"] for p in fid["parts"])
    fabric, wall, inside = out["fabric"], out["wall"], out["inside"]
    assert 40e-6 < fabric["duration_s"] < 50e-6, fabric
    assert 15e-6 < fabric["failed_after_s"] < 25e-6, fabric
    # Split, the wall clock's within a factor of the fabric's (late or early by scheduling, never by D's 20 000).
    assert fabric["duration_s"] / 3 < wall["duration_s"] < fabric["duration_s"] * 3, (fabric, wall)
    assert 0 < wall["failed_after_s"] < fabric["duration_s"] * 3, (fabric, wall)
    # The fabric clock's verdict judges nothing (nothing can be late); the wall clock's judges each worker
    # and how far their clocks agree (on one machine, one clock: a round trip on loopback).
    assert fabric["judged"] == [] and wall["judged"] == ["clocks of engine workers 0 and 1", "engine worker 0",
                                                         "engine worker 1"], wall
    # Inside the engine the job's sends are the worker's events: it is judged, and the figures are the
    # fabric clock's but for lateness.
    assert inside["judged"] == ["engine worker 0"], inside
    assert inside["duration_s"] == pytest.approx(fabric["duration_s"], rel=0.05), (fabric, inside)
    assert inside["failed_after_s"] == pytest.approx(fabric["failed_after_s"], rel=0.05), (fabric, inside)
    for r in (fabric, wall, inside):
        assert r["plane0"] == flows[0].wire_bytes and 0 < r["plane1"] < flows[1].wire_bytes, r


# D in one place (issue 50, item 3): the pacer (emu.dataplane.loop, the schedule's run_paced and stamp) and
# the edges. MetaRoCE's transport and device keep fabric time in a process of their own too, and what waits
# on processes in the hosts from outside (harnesses' time limits, the UDP senders' rates and receivers'
# reports, the control plane's wall-clock timers) asks emu.clock's ProcessClock, where D is applied: no model
# file multiplies or divides by it. The list of exceptions is empty; a new one fails here.
MODEL = ("emu/roce", "emu/dataplane", "emu/collectives", "emu/traffic", "emu/net/flows.py", "emu/control")
PACER = ("emu/dataplane/loop.py", "emu/dataplane/schedule.py")
STILL_CONVERTING: set[str] = set()
_BY_D = re.compile(r"\*\s*(\w+\.)*dilation\b|\bdilation\s*/|/\s*(\w+\.)*dilation\b")


def converting_with_d(root: Path) -> set[str]:
    """The model files with a line that multiplies or divides by a dilation (the compiled schedule's own
    class, the pacer, left out)."""
    found = set()
    for top in MODEL:
        for path in sorted((root / top).rglob("*.py*")) if (root / top).is_dir() else [root / top]:
            rel = str(path.relative_to(root))
            if rel in PACER or path.suffix not in (".py", ".pyx") or not path.exists():
                continue
            text = path.read_text()
            if rel == "emu/dataplane/_core.pyx":  # its Schedule is the compiled pacer
                start = text.index("cdef class Schedule")
                text = text[:start] + text[text.index("\ncdef ", start + 1):]
            if any(_BY_D.search(line) for line in text.splitlines() if not line.lstrip().startswith("#")):
                found.add(rel)
    return found


def test_d_is_applied_by_the_pacer_and_the_hosts_harnesses_only():
    found = converting_with_d(ROOT)
    assert found <= STILL_CONVERTING, f"model code converting with D: {sorted(found - STILL_CONVERTING)}"
    assert found == STILL_CONVERTING, f"no longer converting (shrink the list): {sorted(STILL_CONVERTING - found)}"


def test_the_d_check_finds_a_conversion_where_there_is_one(tmp_path):
    (tmp_path / "emu" / "dataplane").mkdir(parents=True)
    (tmp_path / "emu" / "dataplane" / "pipe.py").write_text("rate = spec.rate_bps / self.dilation\n")
    assert converting_with_d(tmp_path) == {"emu/dataplane/pipe.py"}


# A process's fabric time counts from an epoch: absolute monotonic() / D in int64 picoseconds overflowed on a
# machine up more than 106 days at D = 1. Processes whose instants are compared share the harness's epoch.
def test_a_process_clock_counts_from_its_epoch_on_a_machine_up_for_months(monkeypatch):
    from types import SimpleNamespace

    from emu.clock import ProcessClock
    from emu.simtime import to_ps

    up = 200 * 86400.0  # 200 days, past what an int64 holds at D = 1
    monkeypatch.setattr("emu.clock.time", SimpleNamespace(monotonic=lambda: up))
    with pytest.raises(OverflowError):
        to_ps(up / 1.0)  # what the clock read before it had an epoch
    own = ProcessClock(1.0)
    assert own.epoch == up and own.clock() == 0
    shared = ProcessClock(4.0, epoch_s=up - 8.0)
    assert shared.clock() == 2 * 10**12  # 8 wall seconds at D = 4
    assert shared.at_wall(up - 8.0) == 0 and shared.at_wall(up + 4.0) == 3 * 10**12


def test_the_endpoints_processes_are_given_the_harness_epoch(monkeypatch, tmp_path):
    from emu.roce import perf
    from emu.roce.run import PerfRun

    monkeypatch.setattr("emu.roce.run.scratch_dir", lambda prefix: str(tmp_path))  # no root needed
    cmds: list[list[str]] = []
    run = PerfRun([cmds.append, cmds.append], cmds.append, nbytes=4096, dilation=1000.0)  # type: ignore[arg-type]
    assert len(cmds) == 3
    for cmd in cmds:  # repr gives the same float back
        assert float(cmd[cmd.index("--epoch") + 1]) == run.clock.epoch
    seen = {}
    monkeypatch.setattr(perf, "server", lambda a: seen.setdefault("epoch", a.epoch) and {})
    perf.main(cmds[0][cmds[0].index("emu.roce.perf") + 1:])
    assert seen["epoch"] == run.clock.epoch
