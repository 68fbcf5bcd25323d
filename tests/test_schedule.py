"""One suite of the schedule, run over both cores and both pacings (as ns-3 runs its simulator's tests over
every scheduler): unpaced (the fabric clock: events as fast as the CPU allows) and paced at D (the wall
clock: each event no earlier than the wall mapped to its fabric time). Times are whole picoseconds
(emu.simtime). No root, no namespaces."""

from __future__ import annotations

import random
import time

import pytest

from emu.dataplane.core import make_schedule, native
from emu.dataplane.schedule import identity, origin
from emu.fidelity import Lateness
from emu.simtime import NEVER, PS_PER_S, PS_PER_US, to_ps, to_s

CORES = ["python"] + (["native"] if native() is not None else [])
D = 2000.0  # paced: a fabric microsecond is 2 ms of wall


@pytest.fixture(params=[(c, p) for c in CORES for p in ("unpaced", "paced")], ids=lambda cp: f"{cp[0]}-{cp[1]}")
def sched(request):
    core, pacing = request.param
    s = make_schedule(core, "engine", D)
    if pacing == "paced":
        s.paced = True
        s.anchor_f, s.anchor_w = 0, time.monotonic()  # fabric 0 is now
    else:
        s.busy = 1  # a job runs: unpaced, the schedule is the time
    return s


def run_all(s, late: Lateness | None = None) -> int:
    """Every event, the way the schedule's pacing runs them."""
    late = late or Lateness()
    n = 0
    deadline = time.monotonic() + 10
    while len(s) and time.monotonic() < deadline:
        n += s.run_paced(late, NEVER) if s.paced else s.run_job(1 << 20)
    assert not len(s), "events left"
    return n


def test_events_run_in_time_order_and_ties_of_one_scheduler_in_the_order_scheduled(sched):
    rnd = random.Random(7)
    ran = []
    times = [rnd.choice([1, 2, 3, 2.5]) * PS_PER_US for _ in range(200)]
    times = [int(t) for t in times]
    for i, t in enumerate(times):
        sched.at(t, lambda t, i: ran.append((t, i)), i)
    assert run_all(sched) == 200
    assert ran == sorted(((t, i) for i, t in enumerate(times)), key=lambda x: (x[0], x[1]))
    assert sched.now == max(times)


def test_ties_between_schedulers_follow_their_identities_not_the_order_scheduled(sched):
    """Two origins' events at one instant run in the order of the origins' hashes, whichever was
    scheduled first; an event's children are ordered by the event's identity, not by when it ran."""
    a, b = origin("host", "a"), origin("host", "b")
    first, second = ("a", "b") if a < b else ("b", "a")
    for names in (("a", "b"), ("b", "a")):
        got: list[str] = []
        for name in names:
            was = sched.enter(origin("host", name))
            sched.at(PS_PER_US, lambda t, n, got=got: got.append(n), name)
            sched.leave(was)
        run_all(sched)
        assert got == [first, second], names
    # A child of each at one later instant: its scheduler is its parent's identity.
    ran = []

    def parent(t, name):
        sched.at(t + PS_PER_US, lambda t, n: ran.append(n), name)

    for name in ("a", "b"):
        was = sched.enter(origin("host", name))
        sched.at(2 * PS_PER_US, parent, name)
        sched.leave(was)
    run_all(sched)
    assert ran == sorted("ab", key=lambda n: identity(origin("host", n), 0))


def test_a_key_taken_for_elsewhere_puts_the_event_where_at_would_have(sched):
    """What a peer worker schedules with the key the sender took (reserve, at_key) runs where the sender's
    own at() would have put it, in whatever order the keyed events are handed in."""
    order = []
    for port in range(3):
        was = sched.enter(origin("port", port))
        order += [(2 * port, sched.reserve()), (2 * port + 1, sched.reserve())]
        sched.leave(was)
    ran = []
    for i, key in reversed(order):  # handed in backwards
        sched.at_key(PS_PER_US, *key, lambda t, i: ran.append(i), i)
    run_all(sched)
    direct = make_schedule("python", "virtual")
    did = []
    for port in range(3):
        was = direct.enter(origin("port", port))
        for i in (2 * port, 2 * port + 1):
            direct.at(PS_PER_US, lambda t, i: did.append(i), i)
        direct.leave(was)
    direct.run_until(NEVER, 100)
    assert ran == did and sorted(ran) == list(range(6))


def test_keys_that_tie_in_time_and_in_their_identity_s_high_half_run_in_full_key_order(sched):
    """The compiled heap compares a key's time and its identity's high 32 bits, and reads the rest from the
    event only on a tie there: identities equal above bit 32 and differing below it, or only in the child,
    still run in (time, identity, child) order, handed in shuffled."""
    rnd = random.Random(11)
    high = [0x12345678 << 32, 0x12345679 << 32, 0xFFFFFFFF << 32]
    keys = [(t * PS_PER_US, hi | lo, c) for t in (1, 2) for hi in high
            for lo in (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF) for c in (0, 1, 5)]
    rnd.shuffle(keys)
    ran = []
    for t, h, c in keys:
        sched.at_key(t, h, c, lambda t, key: ran.append(key), (t, h, c))
    run_all(sched)
    assert ran == sorted(keys)


def test_thousands_pending_grow_the_heap_and_reuse_its_slots_in_key_order(sched):
    """More events pending than the compiled heap's first allocation (1024), handed in shuffled with
    runs between them: the heap grows with keys in it, freed slots are taken again, and every event still
    runs in (time, identity, child) order, ties on the identity's high half among them."""
    rnd = random.Random(5)
    keys = list({(rnd.randrange(1, 4) * PS_PER_US, rnd.choice([7 << 32, 9 << 32]) | rnd.randrange(4),
                  rnd.randrange(3000)) for _ in range(6000)})
    rnd.shuffle(keys)
    early, later = keys[:2500], [(t + 3 * PS_PER_US, h, c) for t, h, c in keys[2500:]]
    ran = []
    for key in early:
        sched.at_key(*key, lambda t, key: ran.append(key), key)
    first = sorted(k for k in early if k[0] < 2 * PS_PER_US)  # those at the first microsecond
    while len(ran) < len(first):
        sched.run_paced(Lateness(), 2 * PS_PER_US) if sched.paced else sched.run_job(len(first) - len(ran))
    assert ran == first
    for key in later:  # into the slots the first ones freed, and more
        sched.at_key(*key, lambda t, key: ran.append(key), key)
    run_all(sched)
    assert ran == sorted(early) + sorted(later)


def _contest(s, t0: int, instants: int = 400) -> list[str]:
    """Two symmetric senders, each an event every microsecond from t0, always at the same instant as the
    other's: who runs first at each instant."""
    won = []

    def step(t, name):
        if len(won) < 2 * instants:
            won.append(name)
            s.at(t + PS_PER_US, step, name)

    for name in ("a", "b"):
        was = s.enter(origin("sender", name))
        s.at(t0, step, name)
        s.leave(was)
    while len(s):
        s.run_until(NEVER, 1 << 20)
    return won[0::2]


@pytest.mark.parametrize("core", CORES)
def test_ties_between_symmetric_senders_are_fair_and_do_not_depend_on_when_they_start(core):
    """Neither of two senders that meet at every instant always goes first (scheduling order would make
    one win every time); the same contest started later, or on the other core, runs alike."""
    firsts = _contest(make_schedule(core, "virtual"), 0)
    assert 0.4 < firsts.count("a") / len(firsts) < 0.6, firsts.count("a")
    assert _contest(make_schedule(core, "virtual"), 12_345_678) == firsts
    assert _contest(make_schedule("python", "virtual"), 0) == firsts


def _tree_of_events(core: str, seed: int, roots: int, origins: int, starts: list[int], branches: list[int],
                    limit: int, delay) -> list[tuple[int, int, int]]:
    """A random tree of events on `core`: `roots` of them from `origins` origins at `starts`, each scheduling
    a choice of `branches` children `delay(rnd, t)` after itself, up to `limit`; (time, clock, id) as each ran."""
    s = make_schedule(core, "virtual")
    rnd = random.Random(seed)
    ran: list[tuple[int, int, int]] = []

    def ev(t, i):
        ran.append((t, s.now, i))
        for _ in range(rnd.choice(branches)):
            if len(ran) < limit:
                s.at(t + delay(rnd, t), ev, rnd.getrandbits(20))

    for k in range(roots):
        was = s.enter(origin("rank", k % origins, k))
        s.at(rnd.choice(starts), ev, k)
        s.leave(was)
    s.run_until(NEVER, 1 << 20)
    assert not len(s)
    return ran


def test_both_cores_break_every_tie_alike():
    """A random tree of events, many at equal instants, from several origins and from events: the same
    order on both cores, bit for bit (the keys' hashes are computed alike)."""
    if len(CORES) < 2:
        pytest.skip("the compiled core is not built")
    runs = [_tree_of_events(core, 3, 20, 5, [0, PS_PER_US], [0, 1, 2], 3000,
                            lambda rnd, t: rnd.choice([0, 1, 2]) * PS_PER_US) for core in CORES]
    assert len(runs[0]) > 1000 and runs[0] == runs[1]


def _links_at_ties(core: str, seed: int) -> list[tuple[int, int, bytes]]:
    """Frames from several origins onto four links, at instants on the grid their ends of transmission
    fall on (8 Gb/s: 100 and 200 ns frames, sent every 100 ns), each forwarded at once to another link up
    to five times: many frames arrive at a link exactly when its frame on the wire ends, before or after
    that end in the order of keys. The run goes by steps of 250 ns, some frames given from outside between
    two (at the instant the last step ended, after every event due by it), and PFC pauses and resumes the
    links now and then. (time, link, frame) as each landed."""
    from emu.dataplane.loop import Loop
    from emu.dataplane.pipe import Transmitter

    loop = Loop(core=core)
    s = loop.sched
    cls = Transmitter if core == "python" else native().Transmitter
    rnd = random.Random(seed)
    landed: list[tuple[int, int, bytes]] = []
    links: list = []

    def deliver_to(i: int):
        def deliver(t: int, frame: bytes) -> None:
            landed.append((t, i, frame[:5]))
            if frame[4]:
                links[(i + frame[4]) % 4].enqueue(t, 0, frame[:4] + bytes([frame[4] - 1]) + frame[5:])
        return deliver

    for i, delay in enumerate([0, 100_000, 0, 100_000]):
        links.append(cls(loop, name=f"l{i}", rate_bps=8e9, delay_ps=delay, deliver=deliver_to(i)))
    for k in range(400):
        frame = k.to_bytes(4, "big") + bytes([rnd.randrange(6)]) + bytes(rnd.choice([71, 171]))
        was = s.enter(origin("host", f"h{rnd.randrange(6)}", k))  # each its own key (enter restarts the count)
        s.at(rnd.randrange(400) * 100_000, lambda t, a: links[a[0]].enqueue(t, 0, a[1]), (rnd.randrange(4), frame))
        if k % 8 == 0:  # a pause of 0 (resume), 1 or 3 quanta (64 ns each at 8 Gb/s)
            s.at(rnd.randrange(400) * 100_000, lambda t, a: links[a[0]].pause(t, {0: a[1]}),
                 (rnd.randrange(4), rnd.choice([0, 1, 3])))
        s.leave(was)
    for k, until in enumerate(range(0, 400 * 100_000, 250_000)):
        loop.run(until)
        if k % 3 == 0:
            was = s.enter(origin("outside", k))
            links[k % 4].enqueue(until, 0, (1000 + k).to_bytes(4, "big") + bytes([k % 6]) + bytes(71))
            s.leave(was)
    loop.run()
    assert not len(s)
    return landed


def test_both_cores_send_frames_that_meet_a_link_s_end_of_transmission_alike():
    """A link whose frame on the wire has nothing queued behind it keeps its end of transmission out of the
    compiled core's heap (the Python core schedules it): a frame arriving at that end's instant, before or
    after it in the order of keys, is sent as the Python core sends it, so every frame lands at the same
    instant and in the same order on both."""
    if len(CORES) < 2:
        pytest.skip("the compiled core is not built")
    for seed in range(4):
        runs = [_links_at_ties(core, seed) for core in CORES]
        assert len(runs[0]) > 1000 and runs[0] == runs[1], seed


def test_both_cores_run_events_near_far_and_stamped_late_alike():
    """Events a picosecond apart, tens of microseconds and milliseconds ahead, alone after a long gap, and
    earlier than the running event (outside input stamped late) run in the reference's order, on the
    reference's clock, whatever holds the keys. Among the offsets: a picosecond either side of a timing
    wheel's slices (8.192 ns) and turn (33.5 us), and of far keys' slices (2^19 ps), lead (4 slices) and
    ring (256 slices), two designs measured in the compiled core and not kept (docs/performance.md)."""
    if len(CORES) < 2:
        pytest.skip("the compiled core is not built")
    slice_, lead, ring = 1 << 19, 4 << 19, 256 << 19
    offsets = [0, 1, 8191, 8192, 8193, 3 * 8192 - 1, 33_554_431, 33_554_432, 40 * PS_PER_US, 5 * PS_PER_S // 1000,
               slice_ - 1, slice_, slice_ + 1, lead - 1, lead, lead + 1, ring - 1, ring, ring + 1, 2 * ring + 1]

    def delay(rnd, t):
        d = rnd.choice(offsets) if rnd.random() < 0.7 else rnd.randrange(0, 70 * PS_PER_US)
        return -min(t, rnd.choice([1, 8192, 20 * PS_PER_US])) if rnd.random() < 0.05 else d  # stamped before now

    runs = [_tree_of_events(core, 5, 30, 7, [0, 8191, 8192, PS_PER_US, 50 * PS_PER_US, lead, ring + 1], [0, 1, 2, 2],
                            4000, delay)
            for core in CORES]
    assert len(runs[0]) > 2000 and runs[0] == runs[1]
    assert any(t < now for t, now, _ in runs[0]), "no event ran late"
    assert runs[0][-1][0] > 5 * PS_PER_S // 1000, "no event a few milliseconds ahead"


def test_a_paced_run_never_reorders_events_even_when_late(sched):
    """A slow event makes those after it late: they run late, in the same order as unpaced."""
    ran = []
    for i in range(20):
        sched.at(i * PS_PER_US // 2, lambda t, i: (ran.append(i), time.sleep(0.004 if i == 3 else 0)), i)
    late = Lateness()
    run_all(sched, late)
    assert ran == list(range(20))
    if sched.paced:  # 4 ms of wall is 2 us of fabric at D = 2000: the next events are late, and counted
        assert late.count == 20 and late.max >= 0.003
    else:
        assert late.count == 0


def test_a_paced_event_never_runs_before_the_wall_reaches_it(sched):
    if not sched.paced:
        pytest.skip("unpaced: fabric time is the schedule's own, the wall does not hold it")
    when = []
    for i in range(1, 6):
        sched.at(i * PS_PER_US, lambda t, _: when.append((t, time.monotonic())), None)
    run_all(sched)
    for t, wall in when:
        assert wall >= sched.anchor_w + to_s(t - sched.anchor_f) * D == sched.deadline(t)


def test_outside_input_is_stamped_at_the_fabric_instant_the_wall_maps_to(sched):
    sched.at(5 * PS_PER_US, lambda t, _: None, None)
    run_all(sched)
    stamp = sched.stamp()
    if sched.paced:  # the wall mapped (never before the last event)
        assert stamp >= sched.now
        time.sleep(0.01)
        before = sched.anchor_f + to_ps((time.monotonic() - sched.anchor_w) / D)
        stamp = sched.stamp()
        after = sched.anchor_f + to_ps((time.monotonic() - sched.anchor_w) / D)
        assert type(stamp) is int and before <= stamp <= after
    else:  # a job runs unpaced: nothing outside keeps its time, input enters now
        assert stamp == sched.now == 5 * PS_PER_US


def test_a_time_that_is_not_whole_picoseconds_is_refused(sched):
    """A float (seconds, or a rounded sum) is a caller's bug on either core, not a time to truncate: at every
    entry the schedule has (the compiled core's int64 arguments would otherwise drop the fraction)."""
    with pytest.raises(TypeError, match="whole picoseconds"):
        sched.at(1e-6, lambda t, _: None, None)
    assert not len(sched) and sched.next_time() == NEVER
    for run in (lambda: sched.run_until(2.5, 10), lambda: sched.run_due(2.5), lambda: sched.run_window(2.5, 10),
                lambda: sched.run_paced(Lateness(), 2.5)):
        with pytest.raises(TypeError, match="whole picoseconds"):
            run()
    assert sched.now == 0


@pytest.mark.parametrize("core", CORES)
def test_a_link_refuses_a_float_time_on_either_core(core):
    from emu.dataplane.loop import Loop
    from emu.dataplane.pipe import Transmitter

    loop = Loop(core=core)
    cls = Transmitter if core == "python" else native().Transmitter
    tx = cls(loop, name="t", rate_bps=1e9, delay_ps=0, deliver=lambda t, f: None)
    with pytest.raises(TypeError, match="whole picoseconds"):
        tx.enqueue(1.5, 0, b"x" * 100)


@pytest.mark.parametrize("core", CORES)
def test_a_paced_loop_starts_a_job_at_a_whole_fabric_second_and_the_wall_meets_it_there(core):
    """The wall clock's loop: a job starts at the next whole fabric second, as on the fabric clock, and its
    events are paced from there; the cyclic collector waits while it runs; a second job started during
    the first starts at the fabric instant the wall maps to, not at the last event's time."""
    import gc

    from emu.dataplane.loop import EngineLoop

    loop = EngineLoop(D, core=core, paced=True)
    try:
        t0 = loop.begin()
        sched = loop.sched
        assert t0 == PS_PER_S and sched.anchor_f == PS_PER_S and abs(sched.anchor_w - time.monotonic()) < 0.01
        assert not gc.isenabled()
        time.sleep(0.01)  # 5 fabric us at D = 2000
        t1 = loop.begin()
        assert t1 == sched.now and PS_PER_S + to_ps(0.009 / D) <= t1 <= sched.stamp()
        loop.end()
        loop.end()
        assert gc.isenabled() and loop.running_jobs == 0 and sched.busy == 0
    finally:
        gc.enable()
        loop.epoll.close()
        loop.timer.close()


@pytest.mark.parametrize("core", CORES)
def test_events_far_ahead_are_counted_and_let_go_of_with_the_schedule(core):
    """Events a second and more ahead are counted, and what they hold is let go of when the schedule goes
    unrun, as a near one's is (whatever holds the keys far ahead)."""
    import gc
    import weakref

    class Held:
        pass

    s = make_schedule(core, "virtual")
    near, far = Held(), Held()
    refs = [weakref.ref(near), weakref.ref(far)]
    s.at(10, lambda t, a: None, near)
    s.at(PS_PER_S, lambda t, a: None, far)
    s.at(PS_PER_S + (256 << 19), lambda t, a: None, None)
    del near, far
    assert len(s) == 3 and all(r() is not None for r in refs)
    del s
    gc.collect()
    assert all(r() is None for r in refs)
