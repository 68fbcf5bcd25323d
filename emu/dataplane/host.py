"""What a host port hands its host: a job's endpoint attached there, or the host's kernel.

A worker delivers what a host port's link brings through one of these per
port (emu.dataplane._core.HostPort is its compiled twin, which hands the
frames of a compiled endpoint over without Python). A capture sees every
frame first; UDP (IPv4 or IPv6) to the port a job's counting receiver listens on
goes to it, MetaRoCE (IPv6, UDP to 4791) to the endpoint a job attached there;
everything else goes to the kernel through the port's packet socket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HostDelivery:
    """deliver(t, frame) for one host port. `roce`: on_frame(t, frame) of an attached MetaRoCE endpoint;
    `udp` and `udp_port`: a job's receiver of UDP to that port, over IPv4 or IPv6 (None: the kernel's)."""

    def __init__(self, send: Callable[[Any], None], port: Any, pcap: Any = None) -> None:
        self.send = send
        self.port = port  # what counts a refused send (a switch Port, or a cut cable's HostEnd)
        self.pcap = pcap
        self.roce: Callable[[int, Any], None] | None = None
        self.udp: Callable[[int, Any], None] | None = None
        self.udp_port = -1

    def __call__(self, t: int, frame: Any) -> None:
        if self.pcap is not None:
            self.pcap.write(t, frame)
        udp = self.udp
        # UDP to the port a job's receiver counts on, IPv4 (IHL 5) or IPv6 (no extension header): to it,
        # not the kernel.
        if udp is not None and len(frame) > 41 and frame[12] == 8 and frame[13] == 0 and frame[23] == 17 \
                and frame[14] == 0x45 and frame[36] << 8 | frame[37] == self.udp_port:
            udp(t, frame)
            return
        if udp is not None and len(frame) > 61 and frame[12] == 0x86 and frame[13] == 0xDD and frame[20] == 17 \
                and frame[56] << 8 | frame[57] == self.udp_port:
            udp(t, frame)
            return
        # MetaRoCE (IPv6, UDP to 4791) for an endpoint running in this engine: to it, not the kernel.
        roce = self.roce
        if roce is not None and len(frame) > 62 and frame[12] == 0x86 and frame[13] == 0xDD \
                and frame[20] == 17 and frame[56] == 0x12 and frame[57] == 0xB7:
            roce(t, frame)
            return
        try:
            self.send(frame)
        except OSError:
            self.port.drop("tx_error")
