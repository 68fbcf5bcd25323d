"""Every lab: its solution passes its checker, its untouched starter fails it with a hint (through the CLI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from emu import labs

pytestmark = [pytest.mark.root, pytest.mark.mininet]

LABS = labs.lab_names()


def emu(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emu.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_lab_list_names_every_lab_with_its_title():
    out = emu("lab", "list")
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == LABS
    assert "planes" in LABS


@pytest.mark.parametrize("name", LABS)
def test_solution_passes_and_the_starter_fails_with_a_hint(name, tmp_path, no_leftovers):
    out = emu("lab", "check", name, "--solution", "--json")
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["passed"], json.dumps(result, indent=1)
    assert result["lab"] == name and len(result["steps"]) >= 2

    start = emu("lab", "start", name, "--dir", str(tmp_path / "work"))
    assert start.returncode == 0 and "Step 1" in start.stdout, start.stderr
    again = emu("lab", "start", name, "--dir", str(tmp_path / "work"))
    assert again.returncode == 1 and "already exists" in again.stderr  # never over the student's work

    out = emu("lab", "check", name, "--dir", str(tmp_path / "work"), "--json")
    result = json.loads(out.stdout)
    assert out.returncode == 1 and not result["passed"]
    failed = [s for s in result["steps"] if not s["passed"]]
    assert failed and all("TODO" in s["detail"] for s in failed), result


def test_an_unknown_lab_and_a_missing_working_copy_are_one_clear_error(tmp_path):
    out = emu("lab", "check", "nosuch")
    assert out.returncode == 1 and "no lab 'nosuch'" in out.stderr and "Traceback" not in out.stderr
    out = emu("lab", "check", LABS[0], "--dir", str(tmp_path / "absent"))
    assert out.returncode == 1 and "emu lab start" in out.stderr and "Traceback" not in out.stderr
