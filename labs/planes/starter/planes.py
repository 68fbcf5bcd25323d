"""Lab planes: fill in each function (see README.md), then run `sudo .venv/bin/emu lab check planes`."""

from __future__ import annotations

from emu import FabricNet, FabricStats

PLANES = 4
LEAVES = ("p0l0", "p1l0", "p2l0", "p3l0")


def plane_address(gpu: int, plane: int) -> str:
    """Step 1: the IPv4 address of GPU `gpu` on plane `plane` (FPFTopo(gpus=4, planes=4, leaves=1))."""
    raise NotImplementedError("step 1: return the address from the FPF plan, e.g. an f-string")


def reachable_planes(net: FabricNet, src: str, dst: str) -> list[int]:
    """Step 2: the planes on which `src` gets an answer from `dst`."""
    raise NotImplementedError("step 2: ping dst's address on each plane and keep those that answer")


def plane_shares(before: FabricStats, after: FabricStats) -> list[float]:
    """Step 3: each plane's share of the bytes its leaf sent between the two snapshots."""
    raise NotImplementedError("step 3: subtract the leaves' tx_bytes, then divide by the total")


def dead_plane(shares: list[float]) -> int | None:
    """Step 4: the plane that carried (almost) nothing, or None."""
    raise NotImplementedError("step 4: look for a share far below 1/PLANES")
