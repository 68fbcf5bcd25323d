"""The README's lists against the code they describe (issue 51): its run options table, the options it says
`emu bench collective` takes, the scenarios it shows and the clock each defaults to, the docs it names. A
list written by hand drifts; these fail the day an option, a scenario or a doc is added and not said."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from emu.cli import main as cli
from emu.scenarios import SCENARIOS, scenario_class

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _table_options() -> set[str]:
    """The options in the first column of the README's run options table."""
    start = README.index("| option | what it does |")
    rows = README[start:].split("\n\n", 1)[0].splitlines()[2:]
    return {o for row in rows for o in re.findall(r"`(--[a-z0-9-]+)", row.split(" | ")[0])}


def test_the_run_options_table_names_every_run_option_and_no_other():
    p = argparse.ArgumentParser(add_help=False)
    cli._run_options(p)
    assert _table_options() == _options(p)
    for command in ("up", "run", "scenario"):  # the commands the README says take them
        assert _options(p) <= _options(_subparser(command)), command


def test_the_options_said_of_bench_collective_are_its_own():
    said = README[README.index("(`emu bench collective` takes"):].split(";", 1)[0]
    named = set(re.findall(r"`(--[a-z0-9-]+)`", said))
    assert len(named) >= 5 and named <= _options(_subparser("bench"))


def test_every_scenario_is_shown_and_each_clock_default_list_is_the_codes():
    shown = set(re.findall(r"emu scenario ([a-z0-9][a-z0-9-]*)", README))
    assert shown == set(SCENARIOS)
    row = next(r for r in README.splitlines() if r.startswith("| `--clock fabric"))
    fabric = row.split("all the project's: ", 1)[1].split(". wall:", 1)[0]
    wall = row.split("the default of `up`, `run`, ", 1)[1].split(", whose", 1)[0]
    assert fabric.split(", ") == sorted(n for n in SCENARIOS if scenario_class(n).fabric_clock)
    assert wall.split(" and ") == sorted(n for n in SCENARIOS if not scenario_class(n).fabric_clock)


def test_the_layout_names_every_doc():
    line = next(r for r in README.splitlines() if r.strip().startswith("docs/ "))
    named = set(re.findall(r"[a-z0-9-]+\.md|[a-z0-9-]+/", line.split("docs/", 1)[1]))
    here = {p.name for p in (ROOT / "docs").glob("*.md")} | {p.name + "/" for p in (ROOT / "docs").iterdir()
                                                             if p.is_dir() and p.name != "img"}
    assert named == here


def test_the_readme_opening_figures_are_what_docs_performance_records():
    """Issue 51, item 11: the opening's wall times cannot be asserted on another machine; they are stated as
    measurements (docs/performance.md, "Before and after"), and each is that table's figure."""
    perf = (ROOT / "docs" / "performance.md").read_text().splitlines()

    def row(start: str) -> str:
        return next(line for line in perf if line.startswith(start))

    opening = README.split("## The two commands")[0]
    small, wall, d, big = re.search(r"took ([\d.]+) s for the whole command.*?against ([\d.]+) s on the wall clock "
                                    r"at\s+the D it needs, ([\de]+)\s.*?on 512 GPUs x 8 planes, ([\d.]+) s", opening,
                                    re.S).groups()
    native = row("| FPF 8 x 8, 16 MiB allreduce")
    assert f"{small} s command" in native.split(" | ")[2], native
    assert re.search(rf"\| wall, D = {d} / \S+ .*\| {wall} / \d+ s \|", row("| FPF 8 x 8 | 16 MiB | wall")), wall
    assert f"**{big} s command**" in row("| FPF 512 x 8, 16 MiB"), big
    python_us = float(re.search(r"([\d.]+) us a hop", native.split(" | ")[3]).group(1))
    lo, hi = (float(x) for x in re.search(r"(\d+)-(\d+) ns CPU a hop", native).group(1, 2))
    said = re.search(r"about (\d+) times slower a packet-hop:\s+([\d.]+) us of CPU against (\d+)-(\d+) ns", README)
    assert said and (float(said[2]), float(said[3]), float(said[4])) == (python_us, lo, hi), said
    assert 0.8 * int(said[1]) < python_us * 1e3 / hi < python_us * 1e3 / lo < 1.2 * int(said[1]), (python_us, lo, hi)


def test_the_architecture_names_the_loops_batch_and_the_reference_classes_as_the_code_has_them():
    """docs/architecture.md's figures and names that issue 51 found stale (a batch of 256 that was 2048,
    link.Transmitter and switch.Switch that had moved): each against the code it describes."""
    import importlib

    from emu.dataplane.loop import EngineLoop

    arch = (ROOT / "docs" / "architecture.md").read_text()
    assert f"batches of {EngineLoop.BATCH} events (`EngineLoop.BATCH`)" in arch
    start = arch.index("**The reference core**")
    named = re.findall(r"([a-z]+(?:\.[a-z]+)*)\.([A-Z][A-Za-z]+(?:/[A-Z][A-Za-z]+)?)", arch[start:arch.index("\n\n", start)])
    assert len(named) >= 8, named
    for module, classes in named:
        path = module if module.startswith("emu.") else ("emu." + module if module.split(".")[0] in ("roce", "collectives")
                                                          else "emu.dataplane." + module)
        mod = importlib.import_module(path)
        for cls in classes.split("/"):
            assert isinstance(getattr(mod, cls, None), type), f"{path}.{cls}, named in docs/architecture.md"
