"""The compiled core (emu.dataplane._core, emu.roce._device), made with Cython and the system's C compiler
when `pip install` builds the package.

Where a C compiler is present the build must succeed: a failure stops set-up with the compiler's error,
since a suite that quietly fell back to the Python core would pass with the compiled core untested.
Where there is no compiler (or the user asked for the Python core alone, EMU_CORE=python), set-up says so
in one line and the Python reference core runs instead (the same figures, slower)."""

from __future__ import annotations

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

MODULES = ["emu/dataplane/_core.pyx", "emu/roce/_device.pyx"]
# Not Python: a library preloaded into a job's ranks after libfaketime (emu.net.ranks), plain C.
DILATE = ("emu.net._dilate", "emu/net/dilate.c")
# IEEE arithmetic exactly as Python does it: no fused multiply-add, no fast-math, so the compiled
# core's floating-point sums are the reference's, bit for bit.
CFLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math"]
FALLBACK = "the Python reference core will run (same figures, slower)"


def required() -> bool:
    """The compiled core must build: a C compiler is here and the Python core alone was not asked for."""
    compiler = os.environ.get("CC", "cc").split()[0]
    return os.environ.get("EMU_CORE") != "python" and (shutil.which(compiler) or shutil.which("gcc")) is not None


def optional(what: str, exc: BaseException) -> None:
    """A build step failed: stop set-up where the core is required, else say so in one line."""
    if required():
        raise SystemExit(f"emu: the compiled core did not build ({what}: {exc}). Fix the error above, or set "
                         "EMU_CORE=python to install and test the Python core alone")
    print(f"emu: the compiled core was not built ({what}: {exc}); {FALLBACK}", file=sys.stderr)


class OptionalBuild(build_ext):
    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 (any failure of the toolchain)
            optional("build_ext", exc)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            if ext.name != DILATE[0]:
                optional(ext.name, exc)
            elif shutil.which(os.environ.get("CC", "cc").split()[0]) or shutil.which("gcc"):
                raise SystemExit(f"emu: {DILATE[1]} did not build ({exc}): fix the error above") from exc
            else:
                print(f"emu: {DILATE[1]} was not built ({exc}): a job's ranks will read the kernel's packet "
                      "stamps and setitimer in wall time (docs/architecture.md, \"Jobs in the hosts\")", file=sys.stderr)


def extensions() -> list:
    if os.environ.get("EMU_CORE") == "python":
        print(f"emu: EMU_CORE=python: the compiled core is not built; {FALLBACK}", file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        optional("Cython is not installed", exc)
        return []
    from setuptools import Extension

    exts = [Extension(m[:-4].replace("/", "."), [m], extra_compile_args=CFLAGS) for m in MODULES]
    try:
        return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)
    except Exception as exc:  # noqa: BLE001 (a Cython that cannot translate it)
        optional("Cython", exc)
        return []


def dilate() -> list:
    """The ranks' preload, wherever there is a C compiler (it needs no Cython and is no part of the core)."""
    from setuptools import Extension

    return [Extension(DILATE[0], [DILATE[1]], extra_compile_args=["-O2"], libraries=["dl", "m"])]


setup(ext_modules=extensions() + dilate(), cmdclass={"build_ext": OptionalBuild})
