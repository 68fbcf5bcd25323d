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
