"""Which recorded figures moved, old beside new: for the one commit that re-records tests/data/figures.

    .venv/bin/python tools/figures_moved.py [REV] [--markdown]

Compares every tests/data/figures/*.json in the working tree with the same file at REV (default HEAD, so
after `EMU_RECORD_FIGURES=1 pytest tests/test_cores.py` it shows what the re-recording changed) and prints
each number that moved with its old and new value and how far it moved, relative; then anything else that
changed (a string, a list's length, a key gone or new). A change that must not move the figures shows
"nothing moved"; one that may (issue 50's integer time: rounding to whole picoseconds) shows what to
explain, one line a figure, in the commit message and docs/performance.md (`--markdown`: as a table).
Exit status 0 either way; 2 if REV or a file cannot be read.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIGURES = Path("tests/data/figures")


@dataclass(frozen=True)
class Move:
    """One leaf of a recorded result that differs: `old`/`new` None where the leaf is on one side only."""

    file: str
    path: str
    old: Any
    new: Any

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in (self.old, self.new))

    @property
    def relative(self) -> float:
        """|new - old| / |old| (inf where old is 0 and new is not); numbers only."""
        if self.old == self.new:
            return 0.0
        return abs(self.new - self.old) / abs(self.old) if self.old else math.inf


def moves(old: Any, new: Any, file: str = "", path: str = "") -> list[Move]:
    """Every leaf where `new` differs from `old`, walked in key order (a list of a different length is one
    move: its elements no longer pair up)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[Move] = []
        for k in sorted(set(old) | set(new), key=str):
            if k not in new:
                out.append(Move(file, f"{path}/{k}", old[k], None))
            elif k not in old:
                out.append(Move(file, f"{path}/{k}", None, new[k]))
            else:
                out += moves(old[k], new[k], file, f"{path}/{k}")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [m for i, (a, b) in enumerate(zip(old, new, strict=True)) for m in moves(a, b, file, f"{path}[{i}]")]
    if old == new and type(old) is type(new):
        return []
    return [Move(file, path or "/", old, new)]


def _at(rev: str, rel: str) -> Any:
    out = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


def compare(rev: str = "HEAD") -> list[Move]:
    """The moves from the figures recorded at `rev` to those in the working tree, file by file."""
    names = sorted({p.name for p in (ROOT / FIGURES).glob("*.json")})
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, f"{FIGURES}/"],
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise ValueError(f"cannot read {rev}: {listed.stderr.strip()}")
    names = sorted(set(names) | {Path(n).name for n in listed.stdout.split()})
    out: list[Move] = []
    for name in names:
        rel = str(FIGURES / name)
        path = ROOT / rel
        new = json.loads(path.read_text()) if path.exists() else None
        out += moves(_at(rev, rel), new, name)
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def render(found: list[Move], markdown: bool = False) -> str:
    if not found:
        return "nothing moved"
    rows = [(m.file, m.path, _short(m.old), _short(m.new),
             (f"{m.relative:.2e}" if m.relative != math.inf else "from 0") if m.numeric else "changed")
            for m in sorted(found, key=lambda m: (m.file, -(m.relative if m.numeric else math.inf), m.path))]
    head = ("file", "figure", "old", "new", "moved (relative)")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(f"`{c}`" if i == 1 else c for i, c in enumerate(r)) + " |" for r in rows]
    else:
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    numeric = [m for m in found if m.numeric]
    worst = max((m.relative for m in numeric), default=0.0)
    lines.append(f"{len(found)} moved in {len({m.file for m in found})} files; {len(numeric)} numbers, the largest "
                 f"relative move {worst:.2e}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--markdown"]
    if len(args) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        found = compare(args[0] if args else "HEAD")
    except (ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"figures_moved: {exc}", file=sys.stderr)
        return 2
    print(render(found, markdown="--markdown" in argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
