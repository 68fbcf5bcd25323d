"""A user's own P4 program on BMv2 (`--p4 PROG.p4 --p4-tables HOOK.py`): the example forwards IPv6 with
ECMP on FPF; a program that does not compile and a hook that fails each say so in one line and leave
nothing behind."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emu.backends.bmv2.program import P4ProgramError, compile_program, first_error, load_hook
from emu.net.switch import RunSettings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "p4"
PROGRAM, HOOK = str(EXAMPLES / "ipv6_ecmp.p4"), str(EXAMPLES / "ipv6_ecmp_tables.py")
HAVE_P4C = shutil.which("p4c-bm2-ss") is not None
HAVE_BMV2 = HAVE_P4C and all(shutil.which(t) for t in ("simple_switch", "simple_switch_CLI"))
needs_p4c = pytest.mark.skipif(not HAVE_P4C, reason="needs p4c (p4c-bm2-ss): see README, BMv2 and p4c")
needs_bmv2 = pytest.mark.skipif(not HAVE_BMV2,
                                reason="needs BMv2 (simple_switch, simple_switch_CLI) and p4c: see README, BMv2")


def _bad_program(tmp_path: Path) -> str:
    bad = tmp_path / "bad.p4"
    bad.write_text(Path(PROGRAM).read_text().replace("default_action = drop();", "default_action = drop()", 1))
    return str(bad)


def test_settings_say_what_goes_with_what():
    with pytest.raises(ValueError, match="bmv2"):
        RunSettings(p4=PROGRAM)
    with pytest.raises(ValueError, match="goes with --p4"):
        RunSettings(backend="bmv2", p4_tables=HOOK)
    with pytest.raises(ValueError, match="configure fabric.p4"):
        RunSettings(backend="bmv2", p4=PROGRAM, ecn=(20_000, 200_000, 0.2))
    RunSettings(backend="bmv2", p4=PROGRAM, p4_tables=HOOK)


def test_first_error_is_one_line():
    stderr = ("x.p4(3): [--Wwarn=unused] warning: an error-prone name\n"
              "x.p4(95):syntax error, unexpected IDENTIFIER, expecting ;\n        size\n        ^^^^\n"
              "[--Werror=overlimit] error: 1 errors encountered, aborting compilation\n")
    assert first_error(stderr) == "x.p4(95):syntax error, unexpected IDENTIFIER, expecting ;"


@needs_p4c
def test_compile_error_names_p4cs_first_error(tmp_path):
    bad = _bad_program(tmp_path)
    with pytest.raises(P4ProgramError) as exc:
        compile_program(bad)
    assert re.search(r"does not compile: .*bad\.p4\(\d+\):syntax error", str(exc.value)), exc.value
    assert "\n" not in str(exc.value)
    good = tmp_path / "good.p4"
    good.write_text(Path(PROGRAM).read_text())
    assert '"pipelines"' in compile_program(str(good))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.p4", "good.p4"]  # nothing built beside them


@needs_p4c
def test_editing_an_included_header_outside_the_folder_compiles_again(tmp_path, monkeypatch):
    """The compile is kept under a digest of every file the preprocessor entered: a header in another
    folder, edited, gives a new JSON; unedited, the kept one (p4c is not run again)."""
    import json as json_

    from emu.backends.bmv2 import program

    (tmp_path / "inc").mkdir()
    (tmp_path / "prog").mkdir()
    header = tmp_path / "inc" / "sizes.p4"
    header.write_text("#define ROUTES_SIZE 4096\n")
    text = Path(PROGRAM).read_text()
    assert "size = 4096;" in text
    source = tmp_path / "prog" / "program.p4"
    source.write_text('#include "../inc/sizes.p4"\n' + text.replace("size = 4096;", "size = ROUTES_SIZE;", 1))
    deps = program.dependencies(source)
    assert deps is not None and deps[:2] == [source.resolve(), header.resolve()], deps
    assert "v1model.p4" in {p.name for p in deps}, deps  # p4c's own headers too
    compiles = []
    real_run = subprocess.run

    def counting_run(args, *a, **kw):
        if "-o" in args:
            compiles.append(args)
        return real_run(args, *a, **kw)

    monkeypatch.setattr(program.subprocess, "run", counting_run)

    def routes_size(json_text: str) -> int:
        tables = [t for p in json_.loads(json_text)["pipelines"] for t in p["tables"]]
        return next(t["max_size"] for t in tables if t["name"].endswith("routes"))

    assert routes_size(compile_program(str(source))) == 4096
    assert routes_size(compile_program(str(source))) == 4096 and len(compiles) == 1  # kept
    header.write_text("#define ROUTES_SIZE 2048\n")
    assert routes_size(compile_program(str(source))) == 2048 and len(compiles) == 2  # the header's edit seen
    header.unlink()  # a header gone: not kept, and p4c's own error says so
    with pytest.raises(P4ProgramError, match=r"does not compile: .*sizes\.p4"):
        compile_program(str(source))


def test_hook_that_does_not_import_is_said(tmp_path):
    hook = tmp_path / "hook.py"
    hook.write_text("import no_such_module_here\n")
    with pytest.raises(P4ProgramError, match="does not import: ModuleNotFoundError"):
        load_hook(str(hook))
    hook.write_text("x = 1\n")
    with pytest.raises(P4ProgramError, match="defines no function tables"):
        load_hook(str(hook))


def _counting_hook(tmp_path: Path) -> tuple[Path, Path]:
    """A hook that writes a line to a log each time its module is executed and each time tables() is
    asked, and otherwise is the example's."""
    log = tmp_path / "runs.log"
    hook = tmp_path / "counting_tables.py"
    hook.write_text(
        "import importlib.util\n"
        f"LOG = {str(log)!r}\n"
        "with open(LOG, 'a') as f:\n"
        "    f.write('import\\n')\n"
        f"_spec = importlib.util.spec_from_file_location('example_tables_for_count', {HOOK!r})\n"
        "_example = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_example)\n"
        "def tables(switch):\n"
        "    with open(LOG, 'a') as f:\n"
        "        f.write(f'tables {switch.name}\\n')\n"
        "    return _example.tables(switch)\n")
    return hook, log


def _runs(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_hook_is_imported_once_per_text_and_asked_once_per_facts(tmp_path):
    from emu.backends.bmv2.program import SwitchFacts, hook_tables

    hook, log = _counting_hook(tmp_path)
    first = load_hook(str(hook))
    assert load_hook(str(hook)) is first and _runs(log) == ["import"]
    facts = SwitchFacts("l0", 0, 0, "", "fd00:ff::1", (), (), {})
    other = SwitchFacts("l1", 1, 0, "", "fd00:ff::2", (), (), {})
    assert hook_tables(str(hook), facts) == hook_tables(str(hook), facts) == []
    hook_tables(str(hook), other)
    assert _runs(log) == ["import", "tables l0", "tables l1"]
    hook.write_text(hook.read_text() + "# edited\n")  # a new text: imported and asked again
    assert load_hook(str(hook)) is not first
    hook_tables(str(hook), facts)
    assert _runs(log) == ["import", "tables l0", "tables l1", "import", "tables l0"]


def test_facts_name_each_ports_peer_and_the_next_hops():
    """A leaf with two spines above and a host below: what its hook is told (Mininet's switches faked)."""
    from types import SimpleNamespace

    from emu.backends.bmv2.cli import bmv2_port
    from emu.backends.bmv2.program import switch_facts
    from emu.control.model import Group, NextHop, Route, SwitchTables
    from emu.control.routes import Attachment
    from emu.dataplane.spec import PortSpec, SwitchSpec

    def port(i, name, mac, **kw):
        return PortSpec(index=i, ifname=name, mac=mac, rate_bps=100e9, delay_s=1e-8, **kw)

    tables = SwitchTables(groups=[Group(1, (NextHop(2, "0a:00:00:00:00:02"),)),
                                  Group(2, (NextHop(0, "0b:00:00:00:00:00"), NextHop(1, "0c:00:00:00:00:00")))],
                          routes=[Route("fd00:0:0::2/128", 1), Route("fd00:0:1::2/128", 2)])
    leaf = SwitchSpec("l0", (port(0, "l0-eth1", "02:00:00:00:00:01", peer_kind="switch", peer_switch="s0", peer_port=0),
                             port(1, "l0-eth2", "02:00:00:00:00:02", peer_kind="switch", peer_switch="s1", peer_port=0),
                             port(2, "l0-eth3", "02:00:00:00:00:03", peer_kind="host", peer_mac="0a:00:00:00:00:02",
                                  ipv4=("10.0.0.1/24",), ipv6=("fd00::1/64",))),
                      tables=tables, loopback6="fd00:ff::1")
    spines = [SwitchSpec(n, (port(0, f"{n}-eth1", mac, peer_kind="switch", peer_switch="l0", peer_port=k),),
                         loopback6=f"fd00:ff::8{k}")
              for k, (n, mac) in enumerate((("s0", "0b:00:00:00:00:00"), ("s1", "0c:00:00:00:00:00")))]
    gpu = SimpleNamespace(node=SimpleNamespace(name="gpu0"))
    host_intf = SimpleNamespace(node=SimpleNamespace(name="l0"))
    host_intf.link = SimpleNamespace(intf1=host_intf, intf2=gpu)
    switches = [SimpleNamespace(name="l0", shard=0, intf=lambda name: host_intf),
                SimpleNamespace(name="s0", shard=0), SimpleNamespace(name="s1", shard=0)]
    attachments = [Attachment("10.0.0.2/32", "l0", 2, "0a:00:00:00:00:02"),
                   Attachment("fd00::2/128", "l0", 2, "0a:00:00:00:00:02"), Attachment("fd00:ff::1/128", "l0")]
    facts = switch_facts(switches, [leaf, *spines], attachments, bmv2_port)[0]
    assert (facts.name, facts.plane, facts.loopback6) == ("l0", 0, "fd00:ff::1")
    up, host = facts.port(2), facts.port(3)
    assert (up.peer, up.peer_kind, up.peer_mac, up.peer_port, up.peer_ipv6) == (
        "s1", "switch", "0c:00:00:00:00:00", 1, ("fd00:ff::81",))
    assert (host.peer, host.peer_kind, host.peer_mac, host.peer_ipv4, host.peer_ipv6, host.gateway_ipv6) == (
        "gpu0", "host", "0a:00:00:00:00:02", ("10.0.0.2",), ("fd00::2",), "fd00::1")
    assert facts.host_ports == (host,)
    assert [(h.host, h.address, h.port) for h in facts.hosts] == [("gpu0", "10.0.0.2", 3), ("gpu0", "fd00::2", 3)]
    assert facts.next_hops == {"fd00::2/128": (3,), "fd00:0:1::2/128": (1, 2)}


def _up(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emu.cli.main", "up", "fpf", "--gpus", "2", "--planes", "1",
                           "--backend", "bmv2", "--test", "pingall", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
def test_program_that_does_not_compile_builds_nothing(tmp_path, no_leftovers):
    r = _up("--p4", _bad_program(tmp_path), "--p4-tables", HOOK)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if "does not compile" in line]
    assert len(lines) == 1 and re.search(r"bad\.p4\(\d+\):syntax error", lines[0]), r.stderr


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
def test_fabricnet_refuses_a_program_that_does_not_compile_before_building(tmp_path, no_leftovers):
    from emu.net.fabric import FabricNet
    from emu.topo.fpf import FPFTopo

    with pytest.raises(P4ProgramError, match=r"does not compile: .*bad\.p4\(\d+\):syntax error"):
        FabricNet(FPFTopo(gpus=2, planes=1), backend="bmv2", p4=_bad_program(tmp_path), p4_tables=HOOK)


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
def test_failing_hook_names_the_switch_and_leaves_nothing(tmp_path, no_leftovers):
    hook = tmp_path / "hook.py"
    hook.write_text("def tables(switch):\n"
                    "    if switch.device_id == 1:\n"
                    "        raise ValueError(f'boom on {switch.name}')\n"
                    "    return []\n")
    r = _up("--p4", PROGRAM, "--p4-tables", str(hook))
    assert r.returncode == 1
    assert re.search(r"emu up: (\S+): the table hook \S+ failed: ValueError: boom on \1$", r.stderr, re.M), r.stderr


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
@pytest.mark.long
def test_hook_runs_once_per_run(tmp_path, no_leftovers):
    """`emu up` asks the backend's checks three times and starts once: the hook's module is executed
    once, and tables() once for each switch (the hook runs as root: no more than it must)."""
    hook, log = _counting_hook(tmp_path)
    r = _up("--p4", PROGRAM, "--p4-tables", str(hook), "--json")
    result = json.loads(r.stdout.splitlines()[-1])
    # The example forwards IPv6 only (pingall's IPv4 half is lost): its tables are the ones asked for.
    assert result["pingall"]["ipv6_loss_pct"] == 0 and not result["left_behind"], result
    runs = _runs(log)
    asked = [line.split()[1] for line in runs if line.startswith("tables ")]
    assert runs.count("import") == 1, runs
    from emu.topo.fpf import FPFTopo

    assert sorted(asked) == sorted(FPFTopo(gpus=2, planes=1).switches()), runs  # each switch, once


@pytest.mark.root
@pytest.mark.mininet
@needs_bmv2
def test_example_program_pings_all_over_ipv6_with_ecmp(no_leftovers):
    """FPF 4 x 2 with every switch running examples/p4/ipv6_ecmp.p4, its tables from the example hook."""
    from emu.net.fabric import FabricNet
    from emu.topo.fpf import FPFTopo

    with FabricNet(FPFTopo(gpus=4, planes=2), backend="bmv2", links="engine", p4=PROGRAM, p4_tables=HOOK) as net:
        ping = net.pingall_planes(6)
        leaf = net.get("p0l0").engine.procs["p0l0"].load(["table_dump Route.routes"])
        host_port = net.stats().port("p0l0", "p0l0-eth3")  # counted at the engine's MAC (no fabric.p4 counters)
    assert ping.sent > 0 and ping.loss == 0, ping
    assert host_port.rx_packets > 0 and host_port.tx_packets > 0, host_port
    assert re.search(r"set_group - \w+, 0*2$", leaf, re.M), leaf  # a destination with two equal-cost hops
