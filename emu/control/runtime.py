"""The running control plane: failures, capacity changes, damping, live table pushes.

A failed link is dropped by the data plane at once (a group stops using a
member whose port is down: local fast failover). The control plane learns
of it after a detection delay, recomputes routes and capacity weights over
the live graph, and pushes to each switch only the tables that changed;
each such push is one route update. With a damping hold-down, an update is
never applied sooner than `hold_down` after the previous one, and all that
happened meanwhile is folded into it, so a flapping link does not ripple
churn through the fabric. Delays are in fabric seconds.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from emu.clock import ProcessClock
from emu.control.model import EncapPolicy, SwitchTables
from emu.control.routes import Attachment, FabricGraph, LocalEntries, compute_tables, with_local
from emu.units import FIBRE_S_PER_M, WIRE_OVERHEAD_BYTES, pfc_headroom

PROBE_FRAME = 60


class TablePusher(Protocol):
    def set_tables(self, switch: str, tables: dict[str, Any]) -> None: ...

    def set_port(self, switch: str, port: str, up: bool) -> None: ...

    def set_headroom(self, switch: str, port: str, nbytes: int) -> None: ...

    def probe_rtts(self, switch: str, port: str, count: int = 5) -> list[float]: ...


@dataclass(frozen=True)
class CableMeasurement:
    switch: str
    port: str
    rtt_s: float
    length_m: float
    headroom: int


@dataclass(frozen=True)
class ControlTiming:
    detection_s: float = 50e-6
    hold_down_s: float = 0.0

    def __post_init__(self) -> None:
        if self.detection_s < 0 or self.hold_down_s < 0:
            raise ValueError("detection delay and hold-down must be >= 0")


class FabricController:
    def __init__(self, engine: TablePusher, graph: FabricGraph, attachments: list[Attachment], *,
                 port_names: dict[tuple[str, int], str], dilation: float, spray: bool = False,
                 timing: ControlTiming | None = None, local: dict[str, LocalEntries] | None = None,
                 pushed: dict[str, SwitchTables] | None = None) -> None:
        """`pushed`: the tables the switches started with, where the caller computed them from this graph
        and these attachments (build_spec does: computing them again was 9 s of an FPF 512 x 8 bring-up)."""
        self.engine = engine
        self.graph = graph
        self.attachments = attachments
        self.port_names = port_names
        self.dilation = dilation
        self.wall = ProcessClock(dilation)  # its timers wait in wall time: D applied here
        self.spray = spray
        self.timing = timing or ControlTiming()
        self.local = local or {}
        if pushed is None or set(pushed) != set(graph.graph.nodes):
            pushed = self.tables()
        # What each switch has, as tables: compared as they are, made into dicts only to be pushed (every
        # route of FPF 4096 x 8 made a dict again at start was a second or two of its bring-up).
        self.pushed: dict[str, SwitchTables] = dict(pushed)
        self.updates = 0
        self.recomputes = 0
        self.error = ""  # the first route update a data plane refused since the last settle()
        self._lock = threading.Condition()
        self._due: float | None = None
        self._busy = False
        self._last = -1e18
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fabric-control", daemon=True)
        self._thread.start()

    # -- events ---------------------------------------------------------------

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Fail or restore every link between switches a and b."""
        errors = []
        for d in self.graph.links_between(a, b):
            d["up"] = up
            for node in (a, b):
                try:
                    self.engine.set_port(node, self.port_names[(node, d["ports"][node][0])], up)
                except (RuntimeError, OSError) as exc:  # one end's data plane is dead: the rest still reroute
                    errors.append(exc)
        self._changed()
        if errors:
            raise errors[0]

    def set_switch(self, name: str, up: bool) -> None:
        """Fail or restore a whole switch: every one of its fabric links."""
        if name not in self.graph.graph:
            raise ValueError(f"no switch named {name!r}")
        for nbr in set(self.graph.graph.neighbors(name)):
            self.set_link(name, nbr, up)

    def set_capacity(self, a: str, b: str, rate_bps: float) -> None:
        """The capacity a link offers changed (a member of a bundle lost, a degraded optic)."""
        if not rate_bps > 0:
            raise ValueError(f"capacity must be > 0, got {rate_bps}")
        for d in self.graph.links_between(a, b):
            d["rate"] = rate_bps
        self._changed()

    # -- PFC headroom from the cable as measured ---------------------------------------------

    def _link(self, a: str, b: str) -> dict[str, Any]:
        return self.graph.links_between(a, b)[0]

    def measure_cable(self, a: str, b: str, count: int = 5) -> CableMeasurement:
        """Time probes on the uncongested top queue from a to b and back; derive the length."""
        d = self._link(a, b)
        port = self.port_names[(a, d["ports"][a][0])]
        rtt = statistics.median(self.engine.probe_rtts(a, port, count))
        serialisation = (PROBE_FRAME + WIRE_OVERHEAD_BYTES) * 8 / d["rate"]
        one_way = max(0.0, rtt / 2 - serialisation)
        return CableMeasurement(a, port, rtt, one_way / FIBRE_S_PER_M, pfc_headroom(d["rate"], one_way))

    def size_headroom(self, a: str, b: str) -> tuple[CableMeasurement, CableMeasurement]:
        """Measure the link from both ends and give each end's port the headroom its cable needs."""
        ends = (self.measure_cable(a, b), self.measure_cable(b, a))
        for m in ends:
            self.engine.set_headroom(m.switch, m.port, m.headroom)
        return ends

    def set_headroom_for_length(self, a: str, b: str, length_m: float) -> None:
        """Headroom on both ends as if the cable were `length_m` long (the worst-case habit)."""
        self.set_link_headroom(a, b, pfc_headroom(self._link(a, b)["rate"], length_m * FIBRE_S_PER_M))

    def set_link_headroom(self, a: str, b: str, nbytes: int) -> None:
        """PFC headroom of `nbytes` (bytes) on the ports at both ends of the link a-b, live."""
        d = self._link(a, b)
        for node in (a, b):
            self.engine.set_headroom(node, self.port_names[(node, d["ports"][node][0])], int(nbytes))

    def set_policy(self, switch: str, prefix: str, segments: list[str], source: str) -> None:
        """Steer IPv6 traffic to `prefix` entering at `switch` over `segments` (H.Encaps), live."""
        policy = EncapPolicy(prefix, tuple(segments), source)
        entries = self.local.setdefault(switch, LocalEntries())
        entries.encaps = [e for e in entries.encaps if e.prefix != prefix] + [policy]
        self._apply()

    def clear_policy(self, switch: str, prefix: str) -> None:
        entries = self.local.get(switch)
        if entries is None or not any(e.prefix == prefix for e in entries.encaps):
            raise ValueError(f"{switch} has no policy for {prefix}")
        entries.encaps = [e for e in entries.encaps if e.prefix != prefix]
        self._apply()

    def _changed(self) -> None:
        now = time.monotonic()
        due = now + self.wall.wall_s(self.timing.detection_s)
        due = max(due, self._last + self.wall.wall_s(self.timing.hold_down_s))
        with self._lock:
            if self._due is None or due < self._due:
                self._due = due
            self._lock.notify()

    # -- the update loop --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stop and (self._due is None or self._due > time.monotonic()):
                    wait = None if self._due is None else max(0.0, self._due - time.monotonic())
                    self._lock.wait(wait)
                if self._stop:
                    return
                self._due = None
                self._busy = True
            try:
                self._apply()
            except Exception as exc:  # noqa: BLE001 (kept for settle() to raise; the loop must live on)
                self.error = f"route update failed: {exc}"
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def tables(self) -> dict[str, Any]:
        return with_local(compute_tables(self.graph, self.attachments, spray=self.spray), self.local)

    def _apply(self) -> None:
        """Push what changed to every switch. A switch whose data plane refuses (its worker died) does
        not stop the others' updates; the first such error is kept, and settle() raises it."""
        tables = self.tables()
        self.recomputes += 1
        self._last = time.monotonic()
        failed = []
        for sw, t in tables.items():
            if t != self.pushed.get(sw):
                try:
                    self.engine.set_tables(sw, t.to_dict())
                except (RuntimeError, OSError) as exc:
                    failed.append(f"{sw}: {exc}")
                    continue
                self.pushed[sw] = t
                self.updates += 1
        if failed:
            self.error = f"{len(failed)} switch(es) did not take their routes; first {failed[0]}"

    def settle(self, timeout: float | None = None) -> None:
        """Wait until no update is pending. By default for as long as a detection delay and a
        hold-down take at this dilation (a 2 ms hold-down is 40 s of wall time at D = 20 000), and 30 s."""
        if timeout is None:
            timeout = 30.0 + 2 * self.wall.wall_s(self.timing.detection_s + self.timing.hold_down_s)
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._due is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the control plane did not settle")
                self._lock.wait(min(left, 0.05))
        if self.error:
            error, self.error = self.error, ""
            raise RuntimeError(f"the control plane settled, but {error}")

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        self._thread.join(timeout=5)
