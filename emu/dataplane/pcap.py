"""Per-port packet captures, time-stamped in fabric time so tools show the fabric's timing."""

from __future__ import annotations

import struct
import time
from typing import Any

from emu.simtime import to_s

_REC = struct.Struct("<IIII")


class PcapWriter:
    """Nanosecond pcap; a frame at fabric time t is stamped the wall's date when the capture opened plus t:
    a tool's timings are the fabric's."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "wb", buffering=1 << 16)  # noqa: SIM115 (closed by close())
        self.f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
        self.base = time.time()

    def write(self, t: int, frame: Any) -> None:
        """A frame at fabric instant `t` (picoseconds)."""
        ts = self.base + to_s(t)
        sec = int(ts)
        n = len(frame)
        self.f.write(_REC.pack(sec, int((ts - sec) * 1e9), n, n))
        self.f.write(frame)

    def close(self) -> None:
        self.f.close()


def read_frames(path: str) -> list[tuple[float, bytes]]:
    """A pcap this module wrote (or any little-endian one): (time stamp in seconds, frame bytes) each,
    in order; what a checker reads without scapy's guesses about the link type."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ValueError(f"{path}: not a pcap file (too short)")
    magic = struct.unpack_from("<I", data)[0]
    if magic not in (0xA1B23C4D, 0xA1B2C3D4):
        raise ValueError(f"{path}: not a little-endian pcap file (magic {magic:#x})")
    scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
    out, at = [], 24
    while at + 16 <= len(data):
        sec, frac, n, _ = _REC.unpack_from(data, at)
        at += 16
        out.append((sec + frac * scale, data[at:at + n]))
        at += n
    return out
