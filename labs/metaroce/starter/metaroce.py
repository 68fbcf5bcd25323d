"""Lab metaroce: fill in each function (see README.md), then run `sudo .venv/bin/emu lab check metaroce`."""

from __future__ import annotations

from typing import Any


def transfer_ok(client: dict[str, Any], server: dict[str, Any]) -> bool:
    """Step 1: every write completed and the data arrived intact."""
    raise NotImplementedError("step 1: completions_ok == completions, and the server's data_ok")


def failed_planes(client: dict[str, Any]) -> list[int]:
    """Step 2: the planes taken out of the spray during the transfer."""
    raise NotImplementedError("step 2: look at each plane's downs")


def failure_time(client: dict[str, Any], plane: int) -> float:
    """Step 3: fabric time of the last plane_trace sample at which `plane` was still sending."""
    raise NotImplementedError("step 3: walk plane_trace, remember when the plane's count last grew")


def share_after(client: dict[str, Any], t: float) -> list[float]:
    """Step 4: each plane's share of the payload sent after fabric time t."""
    raise NotImplementedError("step 4: the last sample minus the sample at t, over the total")
