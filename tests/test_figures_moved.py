"""tools/figures_moved.py: what a re-recording of tests/data/figures changed, old beside new. No root."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("figures_moved", ROOT / "tools" / "figures_moved.py")
assert _spec is not None and _spec.loader is not None
fm = importlib.util.module_from_spec(_spec)
sys.modules["figures_moved"] = fm  # dataclasses resolve the module's annotations through sys.modules
_spec.loader.exec_module(fm)


def test_a_number_that_moved_is_shown_old_beside_new_with_how_far():
    old = json.loads((ROOT / "tests/data/figures/incast.json").read_text())
    new = copy.deepcopy(old)
    key = next(k for k, v in sorted(new.items()) if isinstance(v, float) and v)
    new[key] = old[key] * (1 + 1e-9)
    found = fm.moves(old, new, "incast.json")
    assert [(m.path, m.old, m.new) for m in found] == [(f"/{key}", old[key], new[key])]
    assert found[0].numeric and math.isclose(found[0].relative, 1e-9, rel_tol=1e-3)
    text = fm.render(found)
    assert f"/{key}" in text and repr(old[key]) in text and "1 moved in 1 files" in text


def test_what_is_not_a_number_is_named_and_nothing_else_is():
    old = {"a": [1, 2, 3], "b": {"c": "x", "d": 0.5}, "gone": 1, "same": [0.1, {"e": True}]}
    new = {"a": [1, 2], "b": {"c": "y", "d": 0.5}, "new": 2, "same": [0.1, {"e": True}]}
    found = {m.path: m for m in fm.moves(old, new)}
    assert set(found) == {"/a", "/b/c", "/gone", "/new"}
    assert (found["/gone"].old, found["/gone"].new) == (1, None) and not found["/gone"].numeric
    assert found["/a"].old == [1, 2, 3] and found["/a"].new == [1, 2]
    assert fm.moves(1, 1.0) and not fm.moves(2.5, 2.5)  # an int become a float is a change in a JSON figure
    assert fm.Move("f", "/x", 0, 1e-12).relative == math.inf
    table = fm.render(list(found.values()), markdown=True).splitlines()
    assert table[0].startswith("| file | figure | old | new |") and len(table) == 2 + 4 + 1


def test_against_the_last_commit_the_recorded_figures_have_not_moved():
    """This checkout's figures are those committed (a change that moves them commits them with its reasons)."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "figures_moved.py"), "HEAD"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "nothing moved", out.stdout + out.stderr
    bad = subprocess.run([sys.executable, str(ROOT / "tools" / "figures_moved.py"), "no-such-rev"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cannot read no-such-rev" in bad.stderr
