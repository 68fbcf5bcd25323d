"""Lab trimming: fill in each function (see README.md), then `sudo .venv/bin/emu lab check trimming`."""

from __future__ import annotations


def trimmed_lengths(size: int) -> tuple[int, int]:
    """Step 1: (IPv6 payload length, UDP length) of a packet cut to `size` bytes after its Ethernet header."""
    raise NotImplementedError("step 1: what is left after the IPv6 header, and the UDP header is part of it")


def trim_size() -> int:
    """Step 2: the bytes after the Ethernet header a switch keeps when it cuts a packet."""
    raise NotImplementedError("step 2: enough for the receiver to know whose packet, and which, it was")


def nacked_psns(frames: list[bytes]) -> list[int]:
    """Step 3: the PSNs the receiver NACKed (AETH syndrome 0x60), in order."""
    raise NotImplementedError("step 3: find the ACK packets (BTH opcode 0x11) and read their AETH")
