"""The fabric clock's windows, written once: how the parts of a split fabric run a job in step.

Each part (a worker process on some machine, or a partition inside one process) keeps its own
schedule. A window ends at its horizon: the earliest thing any part still has to do, plus the
lookahead L (the shortest propagation delay of a link between parts). A message a part sends in a
window is due at least L after the send, so at or after the horizon: it is with its receiver before
the receiver's next window starts, and no part ever receives something in its past. At the end of its
window a part sends every peer a barrier carrying the earliest time it still has anything at (its
next event, or the earliest message it sent) and whether it is busy; once a part holds every peer's
barrier of that window it schedules what came in, each message with the tie key its sender took for it
(emu.dataplane.schedule: the key the event would have had on one schedule), so it runs among the
receiver's own events where it would have run on one worker; and sets the next horizon from the least
of the barriers. Once no part is
busy, the windows stop at the same fabric time everywhere.

The transport is the caller's: `send_barrier` gets the barrier to every peer (emu.dataplane.channel:
over TCP, flushed; emu.dataplane.partition: a call on each peer's Windows), and what peers send
comes in through `barrier` and `arrive`. Nothing here reads a clock or a socket, so
tests/test_partition.py runs the algorithm the workers run, in virtual time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emu.simtime import NEVER


class LookaheadError(RuntimeError):
    """Something would arrive in its receiver's past: the windows were longer than the lookahead."""


class Windows:
    """One part's windows. `deliver(kind, t, a, payload, key)`: a peer's message, at the time it is due,
    with the tie key its sender took for it;
    `over(t)`: no part is busy any more, and fabric time is `t` on every part; `name(peer)`: how errors
    name a part ("worker 1 (on m2)")."""

    def __init__(self, lookahead: int, peers: Callable[[], int],
                 send_barrier: Callable[[int, int, bool], None],
                 deliver: Callable[[int, int, int, Any, tuple[int, int]], None], over: Callable[[int], None],
                 name: Callable[[int], str] = str) -> None:
        self.lookahead = lookahead
        self.peers = peers  # how many peers there are (a worker's channels connect after it is made)
        self.send_barrier = send_barrier
        self.deliver = deliver
        self.over = over
        self.name = name
        self.active = False  # a job runs in windows
        self.waiting = False  # this part's window is over; the peers' barriers are not all in
        self.window = 0
        self.horizon = NEVER
        self.sent_min = NEVER  # the earliest due time of what this window sent
        self.next_sent_min = NEVER  # ... and of what was sent after this part's barrier: the next window's
        self.mine: tuple[int, bool] = (NEVER, False)
        self.barriers: dict[int, dict[int, tuple[int, bool]]] = {}
        self.inbox: dict[int, list[tuple[int, int, int, int, int, Any, tuple[int, int]]]] = {}
        self.seq: dict[int, int] = {}  # per peer: messages taken, to hand them over in a fixed order
        self.windows = 0
        self.handed = 0  # messages scheduled at the end of a window

    def start(self, t0: int) -> None:
        """A job begins at t0 on every part: the first window ends one lookahead later."""
        self.active, self.waiting = True, False
        self.horizon = min(t0 + self.lookahead, NEVER)  # NEVER: no cut link, an endless window
        self.sent_min = self.next_sent_min = NEVER

    def sent(self, t: int) -> None:
        """This part sent a message, due at `t`: of this window, or of the next once its barrier has gone
        (a kernel's frame on the wall clock, while the peers' barriers are awaited)."""
        if self.waiting:
            self.next_sent_min = min(self.next_sent_min, t)
        elif t < self.sent_min:
            self.sent_min = t

    def sending(self) -> int:
        """The window a message sent now belongs to: after this part's barrier, the next one (its peers
        hold it until that window's barriers are in)."""
        return self.window + 1 if self.waiting else self.window

    def arrive(self, peer: int, window: int, t: int, kind: int, a: int, payload: Any, key: tuple[int, int]) -> None:
        """A peer's message of `window`, due at `t` with tie key `key`: held until that window's barriers
        are all in."""
        if window < self.window:
            raise LookaheadError(f"a message from {self.name(peer)} of window {window} came after that window "
                                 f"closed (this part is at window {self.window})")
        n = self.seq.get(peer, 0) + 1
        self.seq[peer] = n
        self.inbox.setdefault(window, []).append((t, peer, n, kind, a, payload, key))

    def end_window(self, next_event: int, busy: bool) -> None:
        """Everything before `horizon` has run (`next_event`: this part's next; `busy`: it has a job
        left): the barrier goes to every peer, and the window completes once theirs are in."""
        self.mine = (min(next_event, self.sent_min), busy)
        self.waiting = True
        self.send_barrier(self.window, self.mine[0], busy)
        self._complete()

    def barrier(self, peer: int, window: int, t: int, busy: bool) -> None:
        self.barriers.setdefault(window, {})[peer] = (t, busy)
        self._complete()

    def forget(self, peer: int) -> None:
        """A peer is gone (the wall clock goes on without it): the window no longer waits for its barrier
        (`peers()` has already dropped it); what it sent before stays."""
        for got in self.barriers.values():
            got.pop(peer, None)
        self._complete()

    def _complete(self) -> None:
        """Once every peer's barrier of this window is in: schedule what came, and set the next window."""
        if not self.waiting or len(self.barriers.get(self.window, ())) < self.peers():
            return
        theirs = self.barriers.pop(self.window, {})
        got = sorted(self.inbox.pop(self.window, []), key=lambda m: m[:3])
        for t, peer, _, kind, a, payload, key in got:
            if t < self.horizon:
                raise LookaheadError(f"a message from {self.name(peer)} is due at {t!r}, inside the window that "
                                     f"ended at {self.horizon!r}: the lookahead was broken")
            self.deliver(kind, t, a, payload, key)
        self.handed += len(got)
        self.windows += 1
        self.window += 1
        self.waiting = False
        self.sent_min, self.next_sent_min = self.next_sent_min, NEVER
        nxt = min([self.mine[0], *(v[0] for v in theirs.values())])
        if not self.mine[1] and not any(v[1] for v in theirs.values()):
            self.active = False  # no job anywhere: the same instant on every part
            self.over(self.horizon)
            return
        self.horizon = min((nxt if nxt != NEVER else self.horizon) + self.lookahead, NEVER)
