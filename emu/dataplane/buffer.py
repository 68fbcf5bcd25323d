"""A switch's shared packet buffer: reserve, dynamic threshold, PFC headroom.

The model is the one shallow-buffer data-centre switches use and HPCC's ns-3
switch MMU describes. Every (ingress port, priority) owns a small reserve;
above it, packets draw from one shared pool whose per-queue threshold is a
fraction (alpha = 1/2^shift) of what is still free. A lossless priority
whose ingress share crosses that threshold sends XOFF upstream; what is
still in flight then lands in the port's headroom, and only when the
headroom too is full is a lossless packet dropped. That last drop is what an
undersized headroom on a long link produces. Lossy priorities (and lossless
ones with PFC off) are dropped by the egress queue's dynamic threshold.
"""

from __future__ import annotations

NQ = 8
class SharedBuffer:
    __slots__ = (
        "size", "reserve", "headroom", "shift", "egress_alpha", "resume_offset",
        "ingress", "hdrm", "egress", "shared_used", "used", "xoff",
        "total_headroom", "total_reserve",
    )

    def __init__(
        self,
        *,
        nports: int,
        size: int,
        headroom: list[int],
        reserve: int = 4096,
        shift: int = 3,
        egress_alpha: float = 1.0,
        resume_offset: int = 3072,
    ) -> None:
        if len(headroom) != nports:
            raise ValueError("one headroom value per port is needed")
        self.size = size
        self.reserve = reserve
        self.headroom = list(headroom)
        self.shift = shift
        self.egress_alpha = egress_alpha
        self.resume_offset = resume_offset
        self.ingress = [[0] * NQ for _ in range(nports)]
        self.hdrm = [[0] * NQ for _ in range(nports)]
        self.egress = [[0] * NQ for _ in range(nports)]
        self.xoff = [[False] * NQ for _ in range(nports)]
        self.shared_used = 0
        self.used = 0
        self.total_headroom = sum(headroom)
        self.total_reserve = reserve * nports * NQ
        if self.total_headroom + self.total_reserve >= size:
            raise ValueError(
                f"buffer of {size} B cannot hold headroom {self.total_headroom} B + "
                f"reserve {self.total_reserve} B; raise the buffer or shorten the links"
            )

    def set_headroom(self, port: int, nbytes: int) -> None:
        total = self.total_headroom + nbytes - self.headroom[port]
        if nbytes < 0 or total + self.total_reserve >= self.size:
            raise ValueError(f"headroom {nbytes} B on port {port} does not fit a {self.size} B buffer")
        self.total_headroom = total
        self.headroom[port] = nbytes

    def threshold(self) -> int:
        free = self.size - self.total_headroom - self.total_reserve - self.shared_used
        return free >> self.shift if free > 0 else 0

    def _shared(self, port: int, q: int) -> int:
        over = self.ingress[port][q] - self.reserve
        return over if over > 0 else 0

    def admit(self, inp: int, q: int, outp: int, size: int, lossless: bool) -> str | None:
        """None if the packet may be queued, else the drop reason."""
        if lossless:
            if size + self.hdrm[inp][q] > self.headroom[inp] and size + self._shared(inp, q) > self.threshold():
                return "headroom_exhausted"
            return None
        if self.used + size > self.size - self.total_headroom:
            return "buffer_full"
        free = self.size - self.total_headroom - self.total_reserve - self.shared_used
        if self.egress[outp][q] + size > self.reserve + self.egress_alpha * free:
            return "egress_threshold"
        return None

    def charge(self, inp: int, q: int, outp: int, size: int, lossless: bool) -> None:
        self.egress[outp][q] += size
        self.used += size
        new = self.ingress[inp][q] + size
        over = new - self.reserve
        if over <= 0:
            self.ingress[inp][q] = new
            return
        if lossless and over > self.threshold():
            self.hdrm[inp][q] += size
            return
        self.ingress[inp][q] = new
        self.shared_used += size if size < over else over

    def release(self, inp: int, q: int, outp: int, size: int) -> None:
        self.egress[outp][q] -= size
        self.used -= size
        h = self.hdrm[inp][q]
        if h:
            take = h if h < size else size
            self.hdrm[inp][q] = h - take
            size -= take
            if not size:
                return
        old = self.ingress[inp][q]
        new = old - size
        self.ingress[inp][q] = new
        r = self.reserve
        self.shared_used -= (old - r if old > r else 0) - (new - r if new > r else 0)

    def should_pause(self, port: int, q: int) -> bool:
        return not self.xoff[port][q] and (
            self.hdrm[port][q] > 0 or self._shared(port, q) >= self.threshold() > 0
            or (self._shared(port, q) > 0 and self.threshold() == 0)
        )

    def should_resume(self, port: int, q: int) -> bool:
        if not self.xoff[port][q] or self.hdrm[port][q]:
            return False
        shared = self._shared(port, q)
        return shared == 0 or shared + self.resume_offset <= self.threshold()
