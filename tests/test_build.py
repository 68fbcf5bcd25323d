"""The compiled core is built or the suite says so (issue 51): a build that fails where a compiler is stops
set-up with the compiler's error, and a build older than its source is refused, never tested as the new one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from emu.dataplane.core import _older_than_source

ROOT = Path(__file__).resolve().parent.parent


def _package(tmp: Path, core_source: str) -> Path:
    """setup.py with a compiled core of `core_source` (and a trivial device) in `tmp`, and the ranks' preload
    it also builds."""
    shutil.copy(ROOT / "setup.py", tmp / "setup.py")
    (tmp / "emu/net").mkdir(parents=True)
    shutil.copy(ROOT / "emu/net/dilate.c", tmp / "emu/net/dilate.c")
    for pyx, text in (("emu/dataplane/_core.pyx", core_source), ("emu/roce/_device.pyx", "x = 1\n")):
        (tmp / pyx).parent.mkdir(parents=True, exist_ok=True)
        (tmp / pyx).write_text(text)
    return tmp


def _build(tmp: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "EMU_CORE"} | env
    return subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp, env=environ,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here")
def test_a_compiled_core_that_does_not_build_stops_the_set_up_with_the_error(tmp_path):
    out = _build(_package(tmp_path, "def broken(:\n    pass\n"))
    assert out.returncode != 0
    assert "Expected ')'" in out.stderr + out.stdout  # Cython's own words, where the error is
    assert "the compiled core did not build" in out.stderr + out.stdout
    assert not list(tmp_path.rglob("_core*.so"))


def test_the_python_core_alone_when_asked(tmp_path):
    out = _build(_package(tmp_path, "def broken(:\n    pass\n"), EMU_CORE="python")
    assert out.returncode == 0, out.stderr
    assert "EMU_CORE=python: the compiled core is not built" in out.stderr


def test_a_build_older_than_its_source_is_refused(tmp_path):
    built, source = tmp_path / "_core.cpython-311-x86_64-linux-gnu.so", tmp_path / "_core.pyx"
    built.write_text("")
    source.write_text("")
    mod = types.SimpleNamespace(__name__="emu.dataplane._core", __file__=str(built))
    os.utime(source, (1000, 1000))
    os.utime(built, (2000, 2000))
    assert not _older_than_source(mod)
    os.utime(source, (3000, 3000))  # the .pyx edited after the build
    assert _older_than_source(mod)
    (tmp_path / "_core.pxd").write_text("")
    os.utime(source, (1000, 1000))
    os.utime(tmp_path / "_core.pxd", (3000, 3000))  # or its declarations
    assert _older_than_source(mod)
