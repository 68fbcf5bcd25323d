"""A PACKET_RX_RING shared with the kernel: frames are read without a syscall each.

TPACKET_V2 rather than V3: V3 hands frames over a block at a time, when the
block fills or its retire timer (at least 1 ms) fires. At D = 1000 that
timer alone would add up to a microsecond of fabric time per hop, so a
latency-faithful engine takes V2's per-frame hand-over; the saving of the
syscall per frame is the same. A slot too small for a frame marks it
truncated; the engine counts and drops it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import struct
from collections.abc import Iterator

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
TPACKET_V2 = 1
TP_STATUS_USER = 1
TP_STATUS_COPY = 2
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
_HDR = struct.Struct("IIIHHIIHH")  # status, len, snaplen, mac, net, sec, nsec, vlan_tci, vlan_tpid
_STATUS = struct.Struct("I")
_ZERO = b"\x00\x00\x00\x00"
BLOCK = 1 << 16
# Ring sizes per switch port: a port facing a host sees one NIC's bursts; one facing a switch carries
# a fabric link (larger frames after SRv6 encapsulation, deeper bursts). Kernel memory, locked.
HOST_PORT_RING = 1 << 22
FABRIC_PORT_RING = 1 << 21
RING_BUDGET = 1 << 30  # bytes of locked kernel memory one worker's rings may take
MIN_RING = 4 * BLOCK  # 128 host frames, 16 fabric frames: a burst of a few microseconds still fits
_libc = ctypes.CDLL(None, use_errno=True)  # its calls release the GIL; socket.setsockopt does not


def ring_sizes(host_ports: int, fabric_ports: int, budget: int = RING_BUDGET) -> tuple[int, int]:
    """Bytes per ring for a worker's host-facing and switch-facing ports: the defaults, or, when together
    they would pass `budget`, both scaled down alike in whole blocks (at least MIN_RING), so that a
    fabric of thousands of ports fits in memory at the cost of shallower rings."""
    need = host_ports * HOST_PORT_RING + fabric_ports * FABRIC_PORT_RING
    if need <= budget:
        return HOST_PORT_RING, FABRIC_PORT_RING
    scale = budget / need
    return (max(MIN_RING, int(HOST_PORT_RING * scale) // BLOCK * BLOCK),
            max(MIN_RING, int(FABRIC_PORT_RING * scale) // BLOCK * BLOCK))


class RxRing:
    __slots__ = ("mm", "frame_size", "frames", "index", "truncated")

    def __init__(self, sock: socket.socket, *, frame_size: int = 2048, ring_bytes: int = 1 << 20) -> None:
        if frame_size % 16 or BLOCK % frame_size:
            raise ValueError("frame_size must divide the 64 KiB block and be a multiple of 16")
        blocks = max(1, ring_bytes // BLOCK)
        self.frame_size = frame_size
        self.frames = blocks * (BLOCK // frame_size)
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        # Setting a ring waits for an RCU grace period (about 15 ms here, a socket at a time); through
        # libc the GIL is released, so threads opening many ports wait for their grace periods together.
        req = ctypes.create_string_buffer(struct.pack("IIII", BLOCK, blocks, frame_size, self.frames), 16)
        if _libc.setsockopt(sock.fileno(), SOL_PACKET, PACKET_RX_RING, req, 16) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"PACKET_RX_RING: {os.strerror(err)}")
        self.mm = mmap.mmap(sock.fileno(), BLOCK * blocks, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.index = 0
        self.truncated = 0

    def frames_ready(self, limit: int) -> Iterator[bytes]:
        """Yield up to `limit` frames the kernel has filled, handing each slot straight back."""
        mm = self.mm
        fs = self.frame_size
        n = self.frames
        i = self.index
        unpack = _HDR.unpack_from
        try:
            for _ in range(limit):
                off = i * fs
                status, length, snap, mac, _, _, _, tci, tpid = unpack(mm, off)
                if not status & TP_STATUS_USER:
                    break
                start = off + mac
                if status & TP_STATUS_COPY or snap < length:
                    self.truncated += 1
                    frame = None
                elif status & TP_STATUS_VLAN_VALID:
                    # The kernel took the 802.1Q tag off into the header: put it back.
                    tag = struct.pack("!HH", tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100, tci)
                    frame = mm[start : start + 12] + tag + mm[start + 12 : start + snap]
                else:
                    frame = mm[start : start + snap]
                mm[off : off + 4] = _ZERO
                i = i + 1 if i + 1 < n else 0
                if frame is not None:
                    yield frame
        finally:
            self.index = i

    def close(self) -> None:
        self.mm.close()
