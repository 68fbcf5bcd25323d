"""`emu bench sync`: what one conservative-synchronisation round between two processes costs here.

The fabric clock runs every part on one schedule in one process
(docs/architecture.md). Splitting it (SimBricks-style channels: each message
carries the time at which its receiver must take it and promises nothing
earlier follows) costs at least one exchange per lookahead window. This
measures that exchange as the split would make it: two Python processes,
each sending its peer a 24-byte promise (fabric time, window, frames) and
waiting for the other's, over a unix socket pair, as many rounds as asked;
and the same ping-pong with a frame of `--frame` bytes riding along. The
figures say how many windows per second a split can afford at all.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

PROMISE = struct.Struct("<dQQ")  # fabric time, window number, frames that follow


def _pingpong(sock: socket.socket, rounds: int, extra: bytes, first: bool) -> float:
    msg = PROMISE.pack(0.0, 0, 1 if extra else 0) + extra
    need = len(msg)
    buf = bytearray(need)
    view = memoryview(buf)
    t0 = time.perf_counter()
    for _ in range(rounds):
        if first:
            sock.sendall(msg)
        got = 0
        while got < need:
            got += sock.recv_into(view[got:], need - got)
        if not first:
            sock.sendall(msg)
    return time.perf_counter() - t0


def run(params: dict[str, str]) -> dict[str, Any]:
    rounds = int(params.get("rounds", "20000"))
    frame = int(params.get("frame", "1100"))
    if rounds < 100 or not 0 <= frame <= 65536:
        raise ValueError("--rounds must be >= 100 and --frame between 0 and 65536 bytes")
    out: dict[str, Any] = {"bench": "sync", "rounds": rounds, "cpus": os.cpu_count(),
                           "how": "two Python processes, a unix socket pair, one promise each way per round "
                                  "(24 bytes), then with a frame riding along; median of 3 runs each"}
    for label, extra in (("promise_only", b""), ("with_frame", b"\0" * frame)):
        times = []
        for _ in range(3):
            a, b = socket.socketpair()
            pid = os.fork()
            if pid == 0:  # the peer: answers every round, then leaves at once
                a.close()
                try:
                    _pingpong(b, rounds, extra, first=False)
                finally:
                    os._exit(0)
            b.close()
            elapsed = _pingpong(a, rounds, extra, first=True)
            os.waitpid(pid, 0)
            a.close()
            times.append(elapsed / rounds)
        out[f"{label}_round_us"] = sorted(times)[1] * 1e6
    # What that means for a split fabric: rounds per second, and the windows a 10 ns lookahead (a 2 m host
    # cable) needs per fabric millisecond, against a 250 us one (50 km of BAG fibre).
    per = out["promise_only_round_us"] * 1e-6
    out["rounds_per_s"] = 1 / per
    out["wall_s_per_fabric_ms_at_10ns_lookahead"] = 1e-3 / 10e-9 * per
    out["wall_s_per_fabric_ms_at_250us_lookahead"] = 1e-3 / 250e-6 * per
    return out
