import pytest

from emu.dataplane.buffer import SharedBuffer


def mmu(**kw):
    args = dict(nports=3, size=300_000, headroom=[20_000, 20_000, 0], reserve=1000)
    args.update(kw)
    return SharedBuffer(**args)


def test_accounting_returns_to_zero():
    b = mmu()
    for _ in range(30):
        assert b.admit(0, 3, 1, 1500, True) is None
        b.charge(0, 3, 1, 1500, True)
    assert b.hdrm[0][3] > 0  # past the threshold: in headroom
    for _ in range(30):
        b.release(0, 3, 1, 1500)
    assert b.used == 0 and b.shared_used == 0 and b.hdrm[0][3] == 0 and b.ingress[0][3] == 0


def test_lossless_pauses_then_uses_headroom_then_drops():
    b = mmu()
    paused_at = None
    n = 0
    while b.admit(0, 3, 1, 1000, True) is None:
        b.charge(0, 3, 1, 1000, True)
        n += 1
        if paused_at is None and b.should_pause(0, 3):
            paused_at = n
            b.xoff[0][3] = True
    assert paused_at is not None and paused_at < n
    assert b.hdrm[0][3] > 19_000  # the headroom filled before the first drop
    assert b.admit(0, 3, 1, 1000, True) == "headroom_exhausted"
    for _ in range(n):
        b.release(0, 3, 1, 1000)
    assert b.should_resume(0, 3)


def test_lossy_is_dropped_by_egress_threshold_not_paused():
    b = mmu()
    n = 0
    while b.admit(0, 0, 1, 1000, False) is None:
        b.charge(0, 0, 1, 1000, False)
        n += 1
    # Dynamic threshold, alpha 1: a queue may hold its reserve plus what the shared pool has free.
    # The pool is 300 000 - 40 000 headroom - 24 000 reserves = 236 000 B, and this queue's own bytes
    # past its 1000 B reserve come out of it: 1000 k <= 1000 + 236 000 - 1000 (k - 1) gives k <= 118,
    # so 119 packets, half the pool: long before the buffer is full (260).
    assert n == 119
    assert b.admit(0, 0, 1, 1000, False) == "egress_threshold"
    # Lossy traffic is never paused and never spills into headroom.
    assert b.hdrm[0][0] == 0 and not any(any(x) for x in b.xoff)
    assert b.used == 119_000 < b.size - b.total_headroom


def test_buffer_too_small_for_headroom_is_refused():
    with pytest.raises(ValueError, match="cannot hold headroom"):
        mmu(size=30_000)




def _staggered_incast(senders: int = 4, packets: int = 200):
    """Senders of unequal frames, each its own pace, into one port: some XOFFs go out on XOFF's own test of
    the threshold, before a frame spills into headroom (in test_switch's incast the spill sends every one)."""
    from emu.dataplane.spec import QosSpec
    from emu.dataplane.wiring import VirtualFabric
    from tests.helpers import star
    from tests.test_switch import udp4

    tb = VirtualFabric(star(senders + 1, qos=QosSpec(pfc=True, buffer_per_port=128 * 1024)))
    for s in range(1, senders + 1):
        for i in range(packets):
            tb.send("s0", f"s0-eth{s}", udp4(s, 0, size=1000 + 13 * s, tos=26 << 2, sport=1000 + i), t=s * 1000 * i)
    tb.run()
    return tb, tb.switches["s0"]


@pytest.mark.parametrize("kind", ["incast", "staggered"])
def test_the_compiled_buffer_pauses_and_resumes_where_the_reference_does(kind, monkeypatch):
    """The compiled SharedBuffer (emu.dataplane._core) is reached only through a switch: the same incast with
    PFC, on each core, sends the same pause and resume frames to the same hosts at the same instants and
    delivers as many frames at the same instants. test_switch's incast asserts only that some pause went out,
    which a threshold twice the reference's still gives; and the sink gets the same frames in the same order
    (each frame a test sends takes a key of its own, emu.dataplane.wiring.port_key: equal keys, which the
    two cores' heaps ordered differently, are never given)."""
    from emu.dataplane.core import native
    from emu.dataplane.wiring import VirtualFabric
    from tests.test_switch import incast

    if native() is None:
        pytest.skip("the compiled core is not built: nothing to compare")
    runs = {}
    for core in ("python", "native"):
        monkeypatch.setattr(VirtualFabric, "CORE", core)
        tb, sw = incast(pfc=True) if kind == "incast" else _staggered_incast()
        sink = tb.received.pop(("s0", "s0-eth0"))
        runs[core] = ([p.pfc_tx for p in sw.ports], tb.received, sink)
    python, compiled = runs["python"], runs["native"]
    assert sum(python[0]) > 4 and python[0] == compiled[0], (python[0], compiled[0])  # XONs too, not only XOFFs
    assert python[1] == compiled[1], [k for k in python[1] if python[1][k] != compiled[1].get(k)]
    assert len(python[2]) == (1600 if kind == "incast" else 800) and python[2] == compiled[2]
