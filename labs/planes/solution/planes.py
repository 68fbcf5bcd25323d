"""Lab planes: a solution."""

from __future__ import annotations

from emu import FabricNet, FabricStats

PLANES = 4
LEAVES = ("p0l0", "p1l0", "p2l0", "p3l0")


def plane_address(gpu: int, plane: int) -> str:
    return f"10.{plane}.0.{gpu + 2}"  # one leaf per plane: every GPU is on leaf 0, in slot `gpu`


def reachable_planes(net: FabricNet, src: str, dst: str) -> list[int]:
    gpu = int(dst.removeprefix("gpu"))
    host = net.get(src)
    return [p for p in range(PLANES) if " 0% packet loss" in host.cmd(f"ping -c1 -W1 {plane_address(gpu, p)}")]


def plane_shares(before: FabricStats, after: FabricStats) -> list[float]:
    sent = [after.switch(leaf).tx_bytes - before.switch(leaf).tx_bytes for leaf in LEAVES]
    total = sum(sent)
    return [s / total for s in sent] if total else [0.0] * PLANES


def dead_plane(shares: list[float]) -> int | None:
    low = [p for p, s in enumerate(shares) if s < 0.25 / PLANES]
    return low[0] if low else None
