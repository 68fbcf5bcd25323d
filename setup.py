"""The compiled core (emu.dataplane._core and what builds on it), made with Cython and the system's C
compiler when `pip install` builds the package. Optional: where it cannot be built (no compiler, no
Python headers), set-up says so in one line and the Python reference core runs instead."""

from __future__ import annotations

import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

MODULES = ["emu/dataplane/_core.pyx", "emu/roce/_device.pyx"]
# IEEE arithmetic exactly as Python does it: no fused multiply-add, no fast-math, so the compiled
# core's floating-point sums are the reference's, bit for bit.
CFLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math"]


class OptionalBuild(build_ext):
    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 (any failure of the toolchain)
            print(f"emu: the compiled core was not built ({exc}); the Python reference core will run "
                  "(same figures, slower)", file=sys.stderr)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"emu: the compiled core was not built ({exc}); the Python reference core will run "
                  "(same figures, slower)", file=sys.stderr)


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("emu: Cython is not installed: the compiled core is not built; the Python reference core "
              "will run (same figures, slower)", file=sys.stderr)
        return []
    from setuptools import Extension

    exts = [Extension(m[:-4].replace("/", "."), [m], extra_compile_args=CFLAGS) for m in MODULES]
    try:
        return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)
    except Exception as exc:  # noqa: BLE001 (a Cython that cannot translate it)
        print(f"emu: the compiled core was not built (Cython: {exc}); the Python reference core will run "
              "(same figures, slower)", file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuild})
