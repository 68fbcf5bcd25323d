"""Paced UDP flows and counting receivers inside the engine (a job), on either clock.

The same traffic as emu.traffic.udp's processes (datagrams of `size` bytes
paced at a fabric rate, spread over `flows` source ports, counted per source
and per time bin at the receiver), but sent straight into each sender's host
NIC model at its time and counted where the receiver's port would hand it to
the kernel: on the fabric clock nothing can be late, and the figures are the
same on every machine. A sender's frames are built once per source port (IPv4 with DF and
no UDP checksum, as RFC 768 allows; IPv6 with its mandatory checksum, hop limit 64): a send
allocates nothing. Either family: a flow's is its destination address's.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from emu.dataplane.job import Attach, Job
from emu.packet import ETH_P_IPV4, ETH_P_IPV6, UDP, ethernet, ipv4_header, udp6_frame, udp_headers
from emu.simtime import rate_of, ser_ps, to_ps, to_s

IDLE_S = 100e-6  # after the last send, this long without an arrival ends the count (fabric s), at least


class UdpJob(Job):
    """params: flows, each {src: [switch, port, address], dst: [switch, port, address], dst_host, port, nbytes,
    size, rate_bps, tos, flows, sport} (addresses IPv4 or IPv6, both of one family); bin_s (fabric s);
    quiet_s (fabric s: how long without an arrival ends a receiver's count, at least IDLE_S); budget_s.
    Result: per flow what it sent, per receiver (dst_host, UDP port, family: one socket, whichever of the
    host's ports its datagrams arrive at) what arrived, in emu.traffic.udp's result layout but with times
    in fabric s (first_s, duration_s, bin_s).

    The count ends once every flow has sent its last datagram and every receiver either has all its
    flows' bytes or has been quiet for `quiet_s` since its last arrival (what has not arrived by then was
    dropped: the counters say where). On a fabric split over workers each part sends its own hosts'
    flows and counts at its own hosts' receivers; the parts tell each other when their flows have sent
    and their receivers are done, and `merge` joins their results."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        self.bin_s = float(params["bin_s"])
        self.bin = to_ps(self.bin_s)
        self.quiet = to_ps(max(IDLE_S, float(params.get("quiet_s", 0.0))))
        self.senders: list[dict[str, Any] | None] = []  # per flow; None: another worker's host sends it
        # One receiver per host and UDP port, as one socket would be, on every port its flows arrive at.
        self.receivers: dict[tuple[str, int, bool], dict[str, Any] | None] = {}
        self.expect: dict[tuple[str, int, bool], int] = {}
        self.ports: set[tuple[str, str, int]] = set()
        self.last_arrival = 0
        self.sending = 0  # this part's flows still sending
        self.unsent = len(params["flows"])  # every part's, as told
        self.undone = 0  # receivers not yet done, every part's, as told
        self.done_here = False
        for f in params["flows"]:
            v6 = ":" in f["dst"][2]
            key = (f.get("dst_host") or f"{f['dst'][0]}/{f['dst'][1]}", int(f["port"]), v6)
            here = self.here([f["dst"]])
            if key not in self.receivers:
                self.undone += 1
                self.receivers[key] = {"host": key[0], "received_bytes": 0, "by_source": {}, "bins": {},
                                       "bin_s": self.bin_s, "first": None, "last": None,
                                       "socket_overflow_packets": 0} if here else None
            at = (f["dst"][0], f["dst"][1], key[1])
            if here and at not in self.ports:  # one callback a port: the frame's family picks its receiver
                self.ports.add(at)
                host.attach_udp(*at, lambda t, frame, h=key[0], p=key[1]: self._arrive((h, p, frame[12] == 0x86),
                                                                                        t, frame))
            count = -(-int(f["nbytes"]) // int(f["size"]))
            self.expect[key] = self.expect.get(key, 0) + count * int(f["size"])
            if not self.here([f["src"]]):
                self.senders.append(None)
                continue
            send, host_mac, switch_mac = host.attach(f["src"][0], f["src"][1], lambda t, frame: None)
            frames = [self._frame(host_mac, switch_mac, f, int(f.get("sport", 40000)) + i)
                      for i in range(max(1, int(f.get("flows", 1))))]
            wire_bytes = int(f["size"]) + udp_headers(v6) + 24
            self.senders.append({"send": send, "frames": frames, "count": count, "i": 0, "wire": wire_bytes,
                                 "rate": rate_of(float(f["rate_bps"])),
                                 "size": int(f["size"]), "sent_bytes": 0})

    def kick(self) -> None:
        for i, s in enumerate(self.senders):
            if s is not None:
                self.sending += 1
                with self.as_origin("sender", i):
                    self.loop.at(self.t0, self._send, s)

    @staticmethod
    def _frame(host_mac: bytes, switch_mac: bytes, f: dict[str, Any], sport: int) -> bytes:
        src, dst = ipaddress.ip_address(f["src"][2]).packed, ipaddress.ip_address(f["dst"][2]).packed
        size, tos = int(f["size"]), int(f["tos"])
        if len(dst) == 16:  # the traffic class is the TOS byte's IPv6 twin
            return udp6_frame(switch_mac + host_mac + ETH_P_IPV6.to_bytes(2, "big"), tos, src, dst, sport,
                              int(f["port"]), bytes(size))
        udp = UDP.pack(sport, int(f["port"]), 8 + size, 0) + bytes(size)
        return ethernet(switch_mac, host_mac, ETH_P_IPV4, ipv4_header(src, dst, 17, len(udp), tos=tos) + udp)

    def _send(self, t: int, s: dict[str, Any]) -> None:
        i = s["i"]
        s["send"](s["frames"][i % len(s["frames"])])
        s["sent_bytes"] += s["size"]
        s["i"] = i + 1
        if s["i"] < s["count"]:
            # the i-th datagram leaves when the first i have taken their time at the rate: one exact rounding
            self.loop.at(self.t0 + ser_ps(s["i"] * s["wire"], s["rate"]), self._send, s)
        else:
            self.sending -= 1
            if self.sending == 0:
                self.tell(["sent", sum(1 for x in self.senders if x is not None)])

    def _arrive(self, key: tuple[str, int, bool], t: int, frame: Any) -> None:
        r = self.receivers.get(key)
        if r is None:  # the other family to a receiver's port: no socket of that family there
            return
        if key[2]:
            n = (frame[58] << 8 | frame[59]) - 8
            src = int.from_bytes(bytes(frame[22:38]), "big")
        else:
            n = (frame[38] << 8 | frame[39]) - 8
            src = frame[26] << 24 | frame[27] << 16 | frame[28] << 8 | frame[29]  # dotted in result(): no string a packet
        if r["first"] is None:
            r["first"] = t
        r["last"] = t
        r["received_bytes"] += n
        r["by_source"][src] = r["by_source"].get(src, 0) + n
        bins = r["bins"].setdefault(src, {})
        k = (t - r["first"]) // self.bin
        bins[k] = bins.get(k, 0) + n
        self.last_arrival = t
        if self.unsent == 0 and self._complete():
            self._done_here()

    def _complete(self) -> bool:
        return all(r["received_bytes"] >= self.expect[k] for k, r in self.receivers.items() if r is not None)

    def _done_here(self) -> None:
        if not self.done_here:
            self.done_here = True
            self.tell(["done", sum(1 for r in self.receivers.values() if r is not None)])

    def heard(self, t: int, payload: Any) -> None:
        what, n = payload
        if what == "sent":
            self.unsent -= int(n)
            if self.unsent == 0:  # every flow has sent: this part's receivers count until done or quiet
                if self._complete():
                    self._done_here()
                else:
                    self.loop.at(t + self.quiet, self._idle, None)
        else:
            self.undone -= int(n)
            if self.undone == 0:
                self.finish()

    def _idle(self, t: int, _: Any) -> None:
        if self.done_here or self.finished:
            return
        quiet_from = self.last_arrival + self.quiet  # one sum, compared as scheduled: no float ping-pong
        if t >= quiet_from:
            self._done_here()
        else:
            self.loop.at(quiet_from, self._idle, None)

    def finish(self) -> None:
        for sw, port, udp_port in self.ports:
            self.host.attach_udp(sw, port, udp_port, None)
        super().finish()

    def what(self) -> str:
        return f"{len(self.senders)} UDP flow(s)"

    def result(self) -> dict[str, Any]:
        sent = [{"sent_bytes": s["sent_bytes"], "packets": s["i"], "errors": 0} if s is not None else None
                for s in self.senders]
        got: list[dict[str, Any] | None] = []
        for (_, udp_port, v6), r in self.receivers.items():
            if r is None:
                got.append(None)
                continue
            ip = ipaddress.IPv6Address if v6 else ipaddress.IPv4Address
            first, last = r["first"], r["last"]
            got.append({"udp_port": udp_port,
                        # first_s on the t0_fabric_s clock (the loop's time in fabric seconds)
                        **{k: v for k, v in r.items()
                           if k not in ("first", "last", "by_source", "bins")},
                        "first_s": None if first is None else to_s(first),
                        "by_source": {str(ip(a)): n for a, n in r["by_source"].items()},
                        "bins": {str(ip(a)): b for a, b in r["bins"].items()},
                        "duration_s": self.since(last, first) if first is not None and last is not None else 0.0})
        return {"sent": sent, "received": got, "fabric_s": self.since(self.loop.now), "t0_fabric_s": to_s(self.t0)}

    @staticmethod
    def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One result from the parts of a split job: each flow as its sender's part saw it, each
        receiver as its host's part counted it."""
        def pick(field: str) -> list[dict[str, Any]]:
            return [next(p[field][i] for p in parts if p[field][i] is not None) for i in range(len(parts[0][field]))]

        return {**Job.merge(parts), "sent": pick("sent"), "received": pick("received")}
