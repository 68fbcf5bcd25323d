"""Benchmarks: measured against the kernel in the same run, reported with how they were measured."""

from __future__ import annotations

from typing import Any

from emu.net.switch import RunSettings


def run_bench(name: str, params: dict[str, str], *, dilation: float | str | None = None, op: str = "",
              settings: RunSettings | None = None) -> dict[str, Any]:
    if name == "engine":
        from emu.bench import forwarding as engine

        return engine.run(params, backend=settings.backend if settings else "native")
    if name == "link":
        from emu.bench import link_model as link

        if dilation == "auto":
            raise ValueError("`emu bench link` measures the link model at a D you choose (default 1000)")
        return link.run(params, dilation=float(dilation or 1000.0))
    if name == "roce":
        from emu.bench import roce

        return roce.run(params)
    if name == "collective":
        from emu.bench import collective

        return collective.run(op or "allreduce", params, dilation=dilation, settings=settings)
    if name == "setup":
        from emu.bench import setup

        return setup.run(params)
    if name == "calibrate":
        from emu.net import dilation

        forgot = dilation.reset() if params.get("reset") else False
        return {"bench": "calibrate", "machine": dilation.machine_key(), "cache": dilation.cache_path(), "reset": forgot,
                "learnt": dilation.learnt(), "how": "what --dilation auto has learnt on this machine, per kind of "
                                                    "run (CPU seconds per packet and how many runs taught it)"}
    if name == "sync":
        from emu.bench import sync

        return sync.run(params)
    if name == "cut":
        from emu.bench import cut

        return cut.run(params)
    if name == "soak":
        from emu.bench import soak

        return soak.run(params)
    raise ValueError(f"unknown benchmark {name!r}; known: engine, link, collective, roce, setup, soak, sync, cut, calibrate")
