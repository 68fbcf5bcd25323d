"""`--dilation auto`: the smallest D at which this machine keeps a run on time.

The emulator's work is per packet: every MetaRoCE packet is built, sent,
forwarded by the engine at every hop and received, each step costing CPU time
on this machine. A run whose hosts offer P packets per second of fabric time
needs P x c CPU seconds per fabric second (c: CPU seconds per packet, all
steps together); with k cores used at most half, D = P x c / (k / 2). The
cost c is this machine's, learnt from runs and cached per machine: a run
judged by its fidelity verdict tells whether D was enough, and from the
worst part's lateness, by how much it was not. At auto D a run that comes
back with fidelity not ok is run again at a larger D (at most three tries),
so a result at auto D has fidelity ok or says that it could not get there.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable
from typing import Any

CACHE_DIR = "/var/cache/emu"  # what this machine has learnt; EMU_CACHE_DIR puts it elsewhere (the tests do)
FLOOR = 1000.0  # the least D auto picks: below it a wall-clock fabric is too fast for the kernel's own timers
UTILISATION = 0.5  # leave half the cores' time for the kernel, wake-ups and bursts
# CPU s per fabric packet before this machine has taught us: measured here (2 cores, x86), a 4-GPU
# x 2-plane allreduce (88 Mpps) needed D = 20 000 to 50 000: 230-570 us. Per-packet costs are not
# constant (small fabrics pay wake-ups more than CPU), hence what is learnt is kept per fabric shape.
DEFAULT_COST_S = 200e-6
TRIES = 3
# An on-time run teaches the D it would have needed with its worst part at this share of its limit:
# lateness in fabric time shrinks as 1/D, so a run at D whose worst part used a share r of its limit
# would have been at HEADROOM at D x r / HEADROOM. Never more than the D that was run (what was
# measured bounds what is learnt), never less than a quarter of it (a step down is taken in steps).
HEADROOM = 0.5
LEARN_DOWN_AT_MOST = 4.0


def machine_key() -> str:
    """What makes costs comparable: the CPU model, the number of cores, the Python."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{model}|{os.cpu_count()}|{platform.python_version()}"


def cache_path() -> str:
    """The calibration file: EMU_CACHE_DIR's, else this machine's (/var/cache/emu). Read at each use, so a
    process started with EMU_CACHE_DIR (a test's subprocess) never touches the machine's own."""
    return os.path.join(os.environ.get("EMU_CACHE_DIR") or CACHE_DIR, "calibration.json")


def _load() -> dict[str, Any]:
    try:
        with open(cache_path()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def cost_per_packet(kind: str, default: float = DEFAULT_COST_S) -> tuple[float, str]:
    """(CPU seconds per packet, where the figure comes from) for work of this kind."""
    entry = _load().get(machine_key(), {}).get(kind)
    if isinstance(entry, dict) and entry.get("cost_s", 0) > 0:
        return float(entry["cost_s"]), f"learnt on this machine from {entry.get('runs', 1)} run(s)"
    return default, "default (this machine has no calibration yet)"


def cost_of(dilation: float, load_pps: float) -> float:
    """The per-packet cost that makes `choose` answer `dilation` for `load_pps`: how a D known to
    work for a known load (a scenario's documented default) becomes a starting cost."""
    return dilation * (os.cpu_count() or 1) * UTILISATION / load_pps


def learn(kind: str, cost_s: float) -> None:
    """Keep the cost that gave fidelity ok on this machine for this kind of run (the latest)."""
    data = _load()
    entry = data.setdefault(machine_key(), {}).setdefault(kind, {"cost_s": 0.0, "runs": 0})
    entry["cost_s"] = cost_s
    entry["runs"] = int(entry.get("runs", 0)) + 1
    path = cache_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only machine still runs, it only does not remember


def reset() -> bool:
    """Forget what this machine has learnt (every kind); True if there was something to forget."""
    data = _load()
    if not data.pop(machine_key(), None):
        return False
    try:
        with open(cache_path(), "w") as f:
            json.dump(data, f, indent=1)
    except OSError:
        return False
    return True


def learnt() -> dict[str, Any]:
    """What this machine has learnt, by kind of run: cost per packet and how many runs taught it."""
    return dict(_load().get(machine_key(), {}))


def _over(fid: dict[str, Any]) -> float:
    """How far the worst part was from its limit (1.0: at it): p99 against the jitter limit, or a paced
    sender's mean against its own."""
    w, t = fid.get("worst") or {}, fid.get("threshold") or {}
    if not w or not t:
        return 0.0
    return max(w.get("p99_packet_times", 0.0) / t["packet_times"],
               w.get("mean_packet_times", 0.0) / t["paced_mean_packet_times"] if w.get("paced") else 0.0)


def teach(kind: str, d: float, fid: dict[str, Any], load_pps: float) -> None:
    """Learn from a run at D that was on time. At the floor, the run says only that the cost is at most
    what the floor implies for its load (a few pings a second make that tens of seconds a packet, which
    is no cost at all): it may lower what was learnt, never set it."""
    if d > FLOOR:
        learn(kind, cost_of(needed(d, fid), load_pps))
        return
    bound = cost_of(FLOOR, load_pps)
    known = learnt().get(kind)
    if isinstance(known, dict) and known.get("cost_s", 0) > bound:
        learn(kind, bound)


def needed(d: float, fid: dict[str, Any]) -> float:
    """From a run at D that was on time, the D it would have needed (see HEADROOM)."""
    return min(d, max(d / LEARN_DOWN_AT_MOST, d * _over(fid) / HEADROOM))


def nice(d: float) -> float:
    """Round up to 1, 2 or 5 x a power of ten: dilations people can compare."""
    e = 10 ** math.floor(math.log10(d))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= d * 0.999)


def choose(load_pps: float, kind: str, default_cost: float = DEFAULT_COST_S) -> tuple[float, str]:
    """D for a run offering `load_pps` packets per fabric second, and why."""
    cost, source = cost_per_packet(kind, default_cost)
    cores = os.cpu_count() or 1
    d = nice(max(FLOOR, load_pps * cost / (cores * UTILISATION)))
    # The cost is an effective one, CPU plus the slack that keeps every packet on time: far more
    # than a packet's CPU alone, since a late packet is what fidelity judges.
    why = (f"{load_pps / 1e6:.0f} Mpps offered x {cost * 1e6:.0f} us of effective cost per packet ({source}) "
           f"/ {cores} cores at {UTILISATION:.0%}")
    return d, why


def run_auto(run: Callable[[float], dict[str, Any]], load_pps: float, kind: str,
             say: Callable[[str], None] = print, default_cost: float = DEFAULT_COST_S) -> dict[str, Any]:
    """Run at the chosen D; while fidelity is not ok, again at a D scaled by how late the worst
    part was. The result records every try and why its D was chosen."""
    d, why = choose(load_pps, kind, default_cost)
    tries = []
    result: dict[str, Any] = {}
    for attempt in range(TRIES):
        say(f"dilation auto: D={d:g} ({why})")
        result = run(d)
        fid = result.get("fidelity") or {}
        tries.append({"dilation": d, "ok": fid.get("ok"), "why": why,
                      "worst": (fid.get("worst") or {}).get("name"),
                      "rows": [{k: r[k] for k in ("size", "time_us", "busbw_GBps") if k in r}
                               for r in result.get("rows", [])]})
        if fid.get("ok"):
            # Learnt from what this run measured, both ways: a run with room to spare lowers the cost,
            # so one slow run (a busy machine) does not raise every later run's D for good.
            teach(kind, d, fid, load_pps)
            break
        if fid.get("ok") is None or attempt == TRIES - 1:
            break  # unknown fidelity cannot be fixed by a larger D; or out of tries
        w = fid.get("worst") or {}
        over = _over(fid)  # lateness in fabric time shrinks as 1/D
        factor = max(2.0, 1.5 * over)
        why = (f"the run at D={d:g} fell behind ({w.get('name', '?')}, {over:.1f}x its limit): x{factor:.1f}"
               if over > 1 else f"the run at D={d:g} lost packets in the emulator's own I/O: x{factor:.1f}")
        d = nice(d * factor)
    result["dilation_auto"] = {"chosen": d, "tries": tries}
    return result


__all__ = ["cache_path", "choose", "cost_of", "cost_per_packet", "learn", "learnt", "machine_key", "needed", "nice", "reset",
           "run_auto", "teach"]
