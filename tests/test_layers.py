"""Imports only downward (issue 38): each module of emu/ imports only from its own layer or below, so a
reader can learn the code from the bottom up and no change below needs a change above."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top. A module belongs to the first (longest) prefix that names it.
LAYERS: list[tuple[str, ...]] = [
    ("emu.simtime", "emu.units", "emu.packet", "emu.clock", "emu.fidelity", "emu.launch"),
    ("emu.control",),  # the table-entry model and the running control plane: no data plane below it
    ("emu.dataplane",),  # the engine, and the tables it installs from the control plane's model
    ("emu.roce", "emu.traffic", "emu.web"),  # endpoints (engine jobs and host processes); the live view
    ("emu.collectives",),
    ("emu.net", "emu.net.netlink", "emu.net.netns", "emu.net.cleanup", "emu.net.link", "emu.net.switch", "emu.net.backend",
     "emu.net.stats", "emu.net.flows", "emu.net.timebase", "emu.net.dilation"),
    ("emu.backends", "emu.cluster"),  # other data planes and other machines, under one FabricNet
    ("emu.net.fabric",),
    ("emu.topo",),
    ("emu.scenarios", "emu.labs"),
    ("emu.bench",),
    ("emu.cli",),
]
# The backend seam (emu.net.backend) loads a data plane by name when a fabric asks for it, with importlib:
# no import statement names it, and none may climb.


def layer(module: str) -> int:
    best, at = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, at = len(p), i
    assert at >= 0, f"{module} is in no layer: add it to LAYERS"
    return at


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """What a module imports from emu at run time (not what it names for type checkers only)."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("emu.") and not node.level:
            out.append((node.lineno, node.module))
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names
                       if (ROOT / node.module.replace(".", "/") / f"{a.name}.py").exists())
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names if a.name.startswith("emu."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return out


def test_every_import_goes_down_or_stays_in_its_layer():
    up = []
    for path in sorted((ROOT / "emu").rglob("*.py")):
        me = module_of(path)
        if me == "emu":
            continue  # the package's public names: the top of everything
        for line, target in imports(path):
            if layer(target) > layer(me):
                up.append(f"{me}:{line} -> {target}")
    assert not up, "imports that climb:\n" + "\n".join(up)


def test_the_check_sees_a_climb():
    assert layer("emu.dataplane.pipeline") < layer("emu.net.fabric") < layer("emu.scenarios.incast")
    assert layer("emu.net.flows") < layer("emu.backends.bmv2.switch") < layer("emu.net.fabric")


# File names that several packages share because each holds the same kind of thing (README, Layout).
PARALLEL = {
    "__init__.py": "a package",
    "common.py": "what a package's modules share (scenarios, topologies)",
    "job.py": "an engine job: the base (dataplane) and the jobs of the traffic and collectives packages",
    "run.py": "running a package's endpoints from the controller, on either clock (roce, collectives)",
    "switch.py": "the Mininet switch of a data plane (the engine's in net, BMv2's in backends)",
}


def test_one_meaning_per_file_name():
    names: dict[str, list[str]] = {}
    for path in (ROOT / "emu").rglob("*"):
        if path.suffix in (".py", ".pyx", ".pxd") and "__pycache__" not in path.parts:
            names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    shared = {n: sorted(p) for n, p in names.items() if len(p) > 1 and n not in PARALLEL}
    assert not shared, f"file names with two meanings: {shared}"
