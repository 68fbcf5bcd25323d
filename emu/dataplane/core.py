"""Which core runs the hot path: the Python reference, or the compiled one built from it.

The schedule, the links and NIC models and the switch pipeline exist twice:
in Python (emu.dataplane.schedule, pipe, pipeline: the reference a reader
reads) and compiled (emu.dataplane._core, built by the project's set-up
with Cython and gcc). Both run the same events in the same order and give
the same figures bit for bit (tests/test_cores.py runs every fabric-clock
scenario on both). A run chooses once (`RunSettings.core`, `--core`): the
compiled core where it was built, else the reference, said in one line.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

CORES = ("native", "python")
_native: Any = None
_why_not = ""


COMPILED = ("emu.dataplane._core", "emu.roce._device")  # the compiled core's modules, built together


def native() -> Any:
    """The compiled core's module, or None where it was not built or is older than its source (`why_not()`
    says why): an edited .pyx tested as its old build would compare the reference with a stale twin."""
    global _native, _why_not
    if _native is None and not _why_not:
        try:
            mods = [importlib.import_module(name) for name in COMPILED]
        except ImportError as exc:
            _why_not = (f"the compiled core was not built ({exc}): `make setup` builds it with Cython and "
                        "gcc; the Python reference core runs instead, the same figures, slower")
            return None
        stale = [m.__name__ for m in mods if _older_than_source(m)]
        if stale:
            _why_not = (f"the compiled core is older than its source ({', '.join(stale)}): `make setup` "
                        "rebuilds it")
            return None
        _native = mods[0]
    return _native


def _older_than_source(mod: Any) -> bool:
    """Whether a compiled module's .pyx or .pxd beside it (an editable checkout) is newer than its build."""
    built = getattr(mod, "__file__", None) or ""
    base = os.path.join(os.path.dirname(built), mod.__name__.rsplit(".", 1)[-1])
    sources = [base + ext for ext in (".pyx", ".pxd") if os.path.exists(base + ext)]
    return bool(built) and any(os.path.getmtime(src) > os.path.getmtime(built) for src in sources)


def why_not() -> str:
    native()
    return _why_not


def default_core() -> str:
    """EMU_CORE if set (python or native), else native where it was built, else python."""
    chosen = os.environ.get("EMU_CORE", "")
    if chosen:
        return check_core(chosen)
    return "native" if native() is not None else "python"


def check_core(name: str) -> str:
    """`name` if this machine can run it, else one ValueError saying why."""
    if name not in CORES:
        raise ValueError(f"core is one of {', '.join(CORES)}, not {name!r}")
    if name == "native" and native() is None:
        raise ValueError(why_not())
    return name


def make_schedule(core: str, mode: str, idle_dilation: float = 1.0) -> Any:
    """A schedule of `core` reading the clock of `mode`: virtual (unit tests) or engine (a worker's, on either
    clock: paced or not is how its loop runs it, not a mode)."""
    if core == "native":
        return check_native().Schedule(mode, idle_dilation)
    from emu.dataplane.schedule import Schedule

    return Schedule(mode, idle_dilation)


def check_native() -> Any:
    mod = native()
    if mod is None:
        raise ValueError(why_not())
    return mod
