"""Paced UDP senders and a counting receiver, run inside host namespaces.

    python -m emu.traffic.udp send DST PORT --bytes N --size S --rate BPS --tos T
    python -m emu.traffic.udp recv PORT --expect N --idle S

The sender paces at a wall rate (a NIC does not outrun its link); the
receiver counts bytes per source and per time bin. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from emu.fidelity import Lateness, tight_timers
from emu.packet import udp_headers


def _socket(dst: str, port: int, tos: int, sport: int) -> socket.socket:
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if fam == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    else:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
    if sport:
        s.bind(("", sport))
    s.connect((dst, port))
    return s


def send(dst: str, port: int, *, nbytes: int, size: int, rate_bps: float, tos: int, sport: int = 0,
         flows: int = 1) -> dict:
    """`flows` sockets (distinct source ports, so distinct ECMP hashes) take turns."""
    socks = [_socket(dst, port, tos, sport + i if sport else 0) for i in range(max(1, flows))]
    payload = bytearray(size)
    count = (nbytes + size - 1) // size
    per_pkt = (size + udp_headers(":" in dst) + 24) * 8 / rate_bps  # on the wire: headers, preamble, gap
    sent = errors = 0
    late = Lateness()  # each datagram against its paced slot: the generator's fidelity
    tight_timers()  # the default 50 us timer slack made every paced sleep wake that much late
    t0 = time.monotonic()
    for i in range(count):
        due = t0 + i * per_pkt
        now = time.monotonic()
        if due > now + 0.0005:
            time.sleep(due - now)
            now = time.monotonic()
        late.add(now - due if now > due else 0.0)
        payload[0:4] = i.to_bytes(4, "big")
        try:
            socks[i % len(socks)].send(payload)
            sent += size
        except OSError:
            errors += 1
    return {"sent_bytes": sent, "packets": count - errors, "errors": errors, "wall_s": time.monotonic() - t0,
            "lateness": late.summary()}


def rcvbuf_errors() -> int:
    """Datagrams this namespace's kernel dropped for a full socket receive buffer (UDP and UDP6 MIBs):
    what the receiver lost by falling behind, which no switch counter sees."""
    n = 0
    try:
        with open("/proc/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith("Udp:")]
        if len(rows) == 2 and "RcvbufErrors" in rows[0]:
            n += int(rows[1][rows[0].index("RcvbufErrors")])
        with open("/proc/net/snmp6") as f:
            n += sum(int(line.split()[1]) for line in f if line.startswith("Udp6RcvbufErrors"))
    except (OSError, ValueError, IndexError):
        pass
    return n


def recv(port: int, *, expect: int, idle: float, timeout: float, bin_s: float, v6: bool) -> dict:
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    # SO_RCVBUFFORCE, room for everything expected at a veth skb's truesize (about 3x a 1400-byte
    # datagram): 8 MiB overflowed once when a 4 MB incast met a starved receiver.
    s.setsockopt(socket.SOL_SOCKET, 33, min(256 << 20, max(8 << 20, 4 * expect)))
    overflow0 = rcvbuf_errors()
    s.bind(("::" if v6 else "0.0.0.0", port))
    s.settimeout(0.05)
    print(json.dumps({"ready": True}), flush=True)
    got = 0
    by_src: dict[str, int] = {}
    bins: dict[str, dict[int, int]] = {}
    start = time.monotonic()
    first = last = None
    while True:
        now = time.monotonic()
        if expect and got >= expect:
            break
        if last is not None and now - last > idle:
            break
        if now - start > timeout:
            break
        try:
            data, addr = s.recvfrom(65535)
        except TimeoutError:
            continue
        now = time.monotonic()
        first = first if first is not None else now
        last = now
        n = len(data)
        got += n
        by_src[addr[0]] = by_src.get(addr[0], 0) + n
        b = bins.setdefault(addr[0], {})
        k = int((now - first) / bin_s)
        b[k] = b.get(k, 0) + n
    return {"received_bytes": got, "socket_overflow_packets": rcvbuf_errors() - overflow0,
            "by_source": by_src, "bins": bins, "bin_s": bin_s, "first_monotonic": first,
            "wall_s": (last - first) if first is not None and last is not None else 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.traffic.udp")
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("send")
    p.add_argument("dst")
    p.add_argument("port", type=int)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--size", type=int, default=1400)
    p.add_argument("--rate", type=float, required=True, help="wall bits per second")
    p.add_argument("--tos", type=int, default=0)
    p.add_argument("--sport", type=int, default=0)
    p.add_argument("--flows", type=int, default=1, help="spread over this many source ports")
    p = sub.add_parser("recv")
    p.add_argument("port", type=int)
    p.add_argument("--expect", type=int, default=0)
    p.add_argument("--idle", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--bin", type=float, default=0.01)
    p.add_argument("-6", dest="v6", action="store_true")
    a = ap.parse_args(argv)
    if a.mode == "send":
        out = send(a.dst, a.port, nbytes=a.bytes, size=a.size, rate_bps=a.rate, tos=a.tos, sport=a.sport,
                   flows=a.flows)
    else:
        out = recv(a.port, expect=a.expect, idle=a.idle, timeout=a.timeout, bin_s=a.bin, v6=a.v6)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
