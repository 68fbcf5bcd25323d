"""Paced UDP flows and counting receivers on the fabric clock, inside the engine (a job).

The same traffic as emu.traffic.udp's processes (datagrams of `size` bytes
paced at a fabric rate, spread over `flows` source ports, counted per source
and per time bin at the receiver), but sent straight into each sender's host
NIC model at its fabric time and counted where the receiver's port would hand
it to the kernel: nothing can be late, and the figures are the same on every
machine. A sender's frames are built once per source port (IPv4 with DF and
no UDP checksum, as RFC 768 allows): a send allocates nothing.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from emu.dataplane.job import Attach, Job
from emu.packet import ETH_P_IPV4, UDP, ethernet, ipv4_header

HEADER = 42  # Ethernet + IPv4 + UDP in front of each datagram, as emu.traffic.udp counts
IDLE_S = 100e-6  # after the last send, this long without an arrival ends the count (fabric s)


class UdpJob(Job):
    """params: flows, each {src: [switch, port, IPv4], dst: [switch, port, IPv4], dst_host, port, nbytes,
    size, rate_bps, tos, flows, sport}; bin_s (fabric s); budget_s. Result: per flow what it sent, per receiver
    (dst_host, UDP port: one socket, whichever of the host's ports its datagrams arrive at) what arrived, in
    emu.traffic.udp's result layout, times in fabric s."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        self.bin_s = float(params["bin_s"])
        self.senders: list[dict[str, Any]] = []
        # One receiver per host and UDP port, as one socket would be, on every port its flows arrive at.
        self.receivers: dict[tuple[str, int], dict[str, Any]] = {}
        self.expect: dict[tuple[str, int], int] = {}
        self.ports: dict[tuple[str, str, int], tuple[str, int]] = {}
        self.last_arrival = 0.0
        self.sending = 0
        for f in params["flows"]:
            key = (f.get("dst_host") or f"{f['dst'][0]}/{f['dst'][1]}", int(f["port"]))
            if key not in self.receivers:
                self.receivers[key] = {"host": key[0], "received_bytes": 0, "by_source": {}, "bins": {},
                                       "bin_s": self.bin_s, "first_monotonic": None, "last": None,
                                       "socket_overflow_packets": 0}
            at = (f["dst"][0], f["dst"][1], key[1])
            if at not in self.ports:
                self.ports[at] = key
                host.attach_udp4(*at, lambda t, frame, k=key: self._arrive(k, t, frame))
            count = -(-int(f["nbytes"]) // int(f["size"]))
            self.expect[key] = self.expect.get(key, 0) + count * int(f["size"])
            send, host_mac, switch_mac = host.attach(f["src"][0], f["src"][1], lambda t, frame: None)
            frames = [self._frame(host_mac, switch_mac, f, int(f.get("sport", 40000)) + i)
                      for i in range(max(1, int(f.get("flows", 1))))]
            per_pkt = (int(f["size"]) + HEADER + 24) * 8 / float(f["rate_bps"])
            self.senders.append({"send": send, "frames": frames, "count": count, "i": 0, "per_pkt": per_pkt,
                                 "size": int(f["size"]), "sent_bytes": 0})
        self.begin()
        for s in self.senders:
            self.sending += 1
            self.loop.at(self.t0, self._send, s)

    @staticmethod
    def _frame(host_mac: bytes, switch_mac: bytes, f: dict[str, Any], sport: int) -> bytes:
        src, dst = ipaddress.IPv4Address(f["src"][2]).packed, ipaddress.IPv4Address(f["dst"][2]).packed
        size = int(f["size"])
        udp = UDP.pack(sport, int(f["port"]), 8 + size, 0) + bytes(size)
        return ethernet(switch_mac, host_mac, ETH_P_IPV4, ipv4_header(src, dst, 17, len(udp), tos=int(f["tos"])) + udp)

    def _send(self, t: float, s: dict[str, Any]) -> None:
        i = s["i"]
        s["send"](s["frames"][i % len(s["frames"])])
        s["sent_bytes"] += s["size"]
        s["i"] = i + 1
        if s["i"] < s["count"]:
            self.loop.at(self.t0 + s["i"] * s["per_pkt"], self._send, s)
        else:
            self.sending -= 1
            if self.sending == 0:
                self.loop.at(t + IDLE_S, self._idle, None)

    def _arrive(self, key: tuple[str, int], t: float, frame: Any) -> None:
        r = self.receivers[key]
        n = (frame[38] << 8 | frame[39]) - 8
        src = frame[26] << 24 | frame[27] << 16 | frame[28] << 8 | frame[29]  # dotted in result(): no string a packet
        if r["first_monotonic"] is None:
            r["first_monotonic"] = t
        r["last"] = t
        r["received_bytes"] += n
        r["by_source"][src] = r["by_source"].get(src, 0) + n
        bins = r["bins"].setdefault(src, {})
        k = int((t - r["first_monotonic"]) / self.bin_s)
        bins[k] = bins.get(k, 0) + n
        self.last_arrival = t
        if self.sending == 0 and all(self.receivers[x]["received_bytes"] >= self.expect[x] for x in self.receivers):
            self.finish()

    def _idle(self, t: float, _: Any) -> None:
        if self.finished:
            return
        quiet_from = self.last_arrival + IDLE_S  # one sum, compared as it was scheduled: no float ping-pong
        if t >= quiet_from:
            self.finish()  # what has not arrived by now was dropped: the counters say where
        else:
            self.loop.at(quiet_from, self._idle, None)

    def finish(self) -> None:
        for sw, port, udp_port in self.ports:
            self.host.attach_udp4(sw, port, udp_port, None)
        super().finish()

    def what(self) -> str:
        return f"{len(self.senders)} UDP flow(s)"

    def result(self) -> dict[str, Any]:
        sent = [{"sent_bytes": s["sent_bytes"], "packets": s["i"], "errors": 0} for s in self.senders]
        got = []
        for (_, udp_port), r in self.receivers.items():
            first, last = r["first_monotonic"], r["last"]
            ip = ipaddress.IPv4Address
            got.append({"udp_port": udp_port,
                        **{k: v for k, v in r.items() if k not in ("last", "by_source", "bins")},
                        "by_source": {str(ip(a)): n for a, n in r["by_source"].items()},
                        "bins": {str(ip(a)): b for a, b in r["bins"].items()},
                        "wall_s": (last - first) if first is not None and last is not None else 0.0})
        return {"sent": sent, "received": got, "fabric_s": self.loop.now - self.t0, "t0_fabric_s": self.t0}


def start(host: Attach, params: dict[str, Any]) -> UdpJob:
    return UdpJob(host, params)
