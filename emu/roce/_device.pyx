# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""MetaRoCE's data path compiled: emu.roce.transport.Device and emu.roce.endpoint.Endpoint on the fabric clock.

The reference (transport.py, endpoint.py) is the specification: every method here is its method,
step for step, in the same order, with the same integer times and floating-point rates, so a job gives the same figures
on either core bit for bit (tests/test_cores.py). What differs is the cost: segments, the in-flight
window, the SACK set and the charged PSNs are C structures; frames are built into the compiled core's
pooled buffers and handed straight to the switch port's NIC model; an arrival goes straight from the
port to the device; and the operation a device runs (a rank's ring, a perf client's writes: Python
generators) is resumed only when what it waits for holds, which is evaluated here for the waits the
operations use (a receive completion, idle queue pairs).

A frame built here carries its UDP checksum and ICRC as owed (the packet's PENDING flag): nothing in
the model reads them, so they are computed when the frame leaves the compiled core (to the kernel, a
capture, a Python endpoint) and a frame that arrives owing them is valid by construction.
"""

from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from libc.math cimport frexp, rint
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t

from emu.dataplane._core cimport (Schedule, Packet, SwitchBase, Port, FromHost, Sink, Table, packet_new, packet_free,
                                  packet_from, packet_bytes, PENDING, crc32, c_to_ps, c_to_s, c_ser_ps,
                                  c_rate_of, ps_of)


cdef extern from *:
    void __builtin_prefetch(const void* p) nogil
    int __builtin_ctzll(unsigned long long x) nogil

from collections import deque

from emu.roce import wire
from emu.roce.cc import DcqcnParams, make
from emu.roce.transport import SPRAYS, Completion, FabricIO, MemoryRegion, RoceError, zeroed

cdef enum:
    ENTROPY = 4
    DUP_THRESH = 3
    LOSS_TO_DOWN = 8
    CHARGED_KEPT = 4096
    ACK_EVERY = 16
    SACK_BITS = 256
    PSN_MASK = 0xFFFFFF
    MAXP = 16
    OP_WRITE_ONLY = 0x0A
    OP_WRITE_ONLY_IMM = 0x0B
    OP_ACK = 0x11
    OP_CNP = 0x81
    SYNDROME_ACK = 0x1F
    SYNDROME_NAK_PSN = 0x60
    SYNDROME_NAK_ACCESS = 0x62
    DATA_HEADER = 28
    IMM_BYTES = 4
    ICRC_BYTES = 4
    BTH_BYTES = 12
    HEADERS = 28 + 4 + 8 + 40 + 14 + 24
    TC_DATA = 26 << 2 | 0b10
    TC_DATA_TRIMMABLE = 24 << 2 | 0b10
    TC_ACK = 26 << 2
    TC_CNP = 48 << 2
    FABRIC_TX_PORT = 49152
    FABRIC_CTL_PORT = 49168
    FABRIC_CNP_PORT = 49169
    ROCE_PORT = 4791

cdef int64_t ACK_DELAY_PS = 500000  # emu.roce.transport.ACK_DELAY_PS
cdef int64_t NEVER = 9223372036854775807  # emu.simtime.NEVER
cdef int64_t SAMPLE_EVERY = 10000000  # 10 us: Device.sample_every
cdef double LOSS_GAIN = 1.0 / 256
cdef double W_MIN = 1.0 / 16
cdef double W_STEP = 1.0 / 64


# Python's min and max on two floats: the first unless the second is strictly beyond it
cdef inline double pmin(double a, double b) noexcept nogil:
    return b if b < a else a


cdef inline double pmax(double a, double b) noexcept nogil:
    return b if b > a else a


cdef inline int64_t imin(int64_t a, int64_t b) noexcept nogil:
    return b if b < a else a


cdef inline int64_t imax(int64_t a, int64_t b) noexcept nogil:
    return b if b > a else a


cdef inline int64_t smoothed(int64_t srtt, int64_t sample) noexcept nogil:
    """emu.roce.transport.smoothed: (7 srtt + sample) // 8, both >= 0 (C's division is the floor here)."""
    return sample if srtt == 0 else (7 * srtt + sample) // 8


cdef inline int64_t share_ps(int64_t wire_ps, double weight) noexcept nogil:
    """emu.roce.transport.share_ps: 1/weight of the wire time, nearest (rint: halves to even, as round())."""
    return wire_ps if weight == 1.0 else <int64_t>rint(<double>wire_ps / weight)


# -- lateness (emu.fidelity.Lateness's histogram, compiled) ----------------------------------------------

cdef enum:
    BINS_PER_OCTAVE = 16
    MIN_EXP = -40
    NBINS = 1 + 52 * 16
    BIN_OFFSET = -(1 + MIN_EXP) * BINS_PER_OCTAVE - BINS_PER_OCTAVE + 1


cdef struct Late:
    int64_t bins[NBINS]
    int64_t count
    double mx
    double total


cdef inline void late_add(Late* s, double late) noexcept nogil:
    cdef int e
    cdef double m
    cdef int i
    s.count += 1
    if late > 0.0:
        m = frexp(late, &e)
        i = e * BINS_PER_OCTAVE + <int>(m * 2 * BINS_PER_OCTAVE) + BIN_OFFSET
        if i < 1 or i >= NBINS:
            i = 1 if i < 1 else NBINS - 1
        s.bins[i] += 1
        s.total += late
        if late > s.mx:
            s.mx = late
    else:
        s.bins[0] += 1


cdef object late_object(Late* s):
    """An emu.fidelity.Lateness holding this histogram (its summary and quantiles are the reference's)."""
    from emu.fidelity import Lateness

    out = Lateness()
    cdef int i
    for i in range(NBINS):
        out.bins[i] = s.bins[i]
    out.count = s.count
    out.max = s.mx
    out.total = s.total
    return out


# -- segments and the queues of them ---------------------------------------------------------------------

cdef struct Seg:
    int64_t psn
    uint64_t va
    uint32_t rkey
    uint8_t* data       # where its bytes lie in the source region
    int length
    int64_t wr
    int plane
    int64_t sent_at
    int sends
    bint acked
    bint has_imm
    uint32_t imm
    int refs            # held by the pending queue or the window, and by the work request it ends


cdef inline Seg* seg_ref(Seg* s) noexcept:
    s.refs += 1
    return s


cdef inline void seg_unref(Seg* s) noexcept:
    s.refs -= 1
    if s.refs == 0:
        free(s)


# The rings below (SegQ, WrQ, PsnQ, Window) start empty (cap 0) and double from 16 or 64: a capacity is a
# power of two, so an index wraps with a mask (i & (cap - 1)), not a division (an idiv on every packet).
cdef struct SegQ:       # a deque of Seg*
    Seg** a
    Py_ssize_t cap, head, n


cdef int segq_push(SegQ* q, Seg* s) except -1:
    cdef Seg** a
    cdef Py_ssize_t i
    if q.n == q.cap:
        a = <Seg**>malloc(max(16, 2 * q.cap) * sizeof(Seg*))
        if a == NULL:
            raise MemoryError()
        for i in range(q.n):
            a[i] = q.a[(q.head + i) & (q.cap - 1)]
        free(q.a)
        q.a = a
        q.cap = max(16, 2 * q.cap)
        q.head = 0
    q.a[(q.head + q.n) & (q.cap - 1)] = s
    q.n += 1
    return 0


cdef inline Seg* segq_front(SegQ* q) noexcept:
    return q.a[q.head]


cdef inline Seg* segq_pop(SegQ* q) noexcept:
    cdef Seg* s = q.a[q.head]
    q.head = (q.head + 1) & (q.cap - 1)
    q.n -= 1
    return s


cdef void segq_clear(SegQ* q) noexcept:
    while q.n:
        seg_unref(segq_pop(q))


cdef struct Wr:
    int64_t wr_id
    Seg* last
    int64_t nbytes
    bint signaled       # completes into the send queue's completions when acknowledged (ibv's IBV_SEND_SIGNALED)


cdef struct WrQ:
    Wr* a
    Py_ssize_t cap, head, n


cdef int wrq_push(WrQ* q, int64_t wr_id, Seg* last, int64_t nbytes, bint signaled) except -1:
    cdef Wr* a
    cdef Py_ssize_t i
    if q.n == q.cap:
        a = <Wr*>malloc(max(16, 2 * q.cap) * sizeof(Wr))
        if a == NULL:
            raise MemoryError()
        for i in range(q.n):
            a[i] = q.a[(q.head + i) & (q.cap - 1)]
        free(q.a)
        q.a = a
        q.cap = max(16, 2 * q.cap)
        q.head = 0
    q.a[(q.head + q.n) & (q.cap - 1)].wr_id = wr_id
    q.a[(q.head + q.n) & (q.cap - 1)].last = last
    q.a[(q.head + q.n) & (q.cap - 1)].nbytes = nbytes
    q.a[(q.head + q.n) & (q.cap - 1)].signaled = signaled
    q.n += 1
    return 0


cdef struct PsnQ:       # a deque of PSNs (the NACKed ones to resend)
    int64_t* a
    Py_ssize_t cap, head, n


cdef int psnq_push(PsnQ* q, int64_t psn) except -1:
    cdef int64_t* a
    cdef Py_ssize_t i
    if q.n == q.cap:
        a = <int64_t*>malloc(max(16, 2 * q.cap) * sizeof(int64_t))
        if a == NULL:
            raise MemoryError()
        for i in range(q.n):
            a[i] = q.a[(q.head + i) & (q.cap - 1)]
        free(q.a)
        q.a = a
        q.cap = max(16, 2 * q.cap)
        q.head = 0
    q.a[(q.head + q.n) & (q.cap - 1)] = psn
    q.n += 1
    return 0


cdef struct Window:     # the in-flight segments: every PSN from lo to lo + n - 1, in PSN order
    Seg** a
    Py_ssize_t cap, head, n
    int64_t lo


cdef int win_put(Window* w, Seg* s) except -1:
    """inflight[s.psn] = s: a new PSN goes at the end (PSNs are given in order); a resent one stays."""
    cdef Seg** a
    cdef Py_ssize_t i
    if w.n and s.psn < w.lo + w.n:
        return 0  # already there: the same segment (its key keeps its place)
    if w.n == 0:
        w.lo = s.psn
    if w.n == w.cap:
        a = <Seg**>malloc(max(64, 2 * w.cap) * sizeof(Seg*))
        if a == NULL:
            raise MemoryError()
        for i in range(w.n):
            a[i] = w.a[(w.head + i) & (w.cap - 1)]
        free(w.a)
        w.a = a
        w.cap = max(64, 2 * w.cap)
        w.head = 0
    w.a[(w.head + w.n) & (w.cap - 1)] = seg_ref(s)
    w.n += 1
    return 0


cdef inline Seg* win_get(Window* w, int64_t psn) noexcept:
    if w.n == 0 or psn < w.lo or psn >= w.lo + w.n:
        return NULL
    return w.a[(w.head + (psn - w.lo)) & (w.cap - 1)]


cdef inline Seg* win_at(Window* w, Py_ssize_t i) noexcept:
    return w.a[(w.head + i) & (w.cap - 1)]


cdef inline void win_pop_front(Window* w) noexcept:
    cdef Seg* s = w.a[w.head]
    w.head = (w.head + 1) & (w.cap - 1)
    w.n -= 1
    w.lo += 1
    seg_unref(s)


cdef void win_clear(Window* w) noexcept:
    while w.n:
        win_pop_front(w)


cdef struct Charged:    # PSN -> (plane, first sent), in the order first charged (a dict's)
    int64_t* key
    int* plane
    int64_t* first
    bint* live
    Py_ssize_t cap, head, tail, count
    int64_t* hkey       # open addressing: PSN -> slot + 1 (0: empty, -1: deleted)
    int64_t* hval
    Py_ssize_t hcap


cdef inline Py_ssize_t _hslot(Charged* c, int64_t psn) noexcept:
    cdef uint64_t h = <uint64_t>psn * 0x9E3779B97F4A7C15ULL
    return <Py_ssize_t>((h ^ (h >> 31)) & (c.hcap - 1))


cdef Py_ssize_t charged_find(Charged* c, int64_t psn) noexcept:
    """Its slot, or -1."""
    if c.hcap == 0:
        return -1
    cdef Py_ssize_t i = _hslot(c, psn)
    while c.hval[i] != 0:
        if c.hval[i] > 0 and c.hkey[i] == psn:
            return c.hval[i] - 1
        i = (i + 1) & (c.hcap - 1)
    return -1


cdef int _charged_rebuild(Charged* c, Py_ssize_t want) except -1:
    """Compact the order log and the index (after deletions, or to grow)."""
    cdef Py_ssize_t cap = 16, hcap = 32, j = 0, i, k
    while cap < 2 * want:
        cap *= 2
    while hcap < 4 * want:
        hcap *= 2
    cdef int64_t* key = <int64_t*>malloc(cap * sizeof(int64_t))
    cdef int* plane = <int*>malloc(cap * sizeof(int))
    cdef int64_t* first = <int64_t*>malloc(cap * sizeof(int64_t))
    cdef bint* live = <bint*>malloc(cap * sizeof(bint))
    cdef int64_t* hkey = <int64_t*>malloc(hcap * sizeof(int64_t))
    cdef int64_t* hval = <int64_t*>malloc(hcap * sizeof(int64_t))
    if not (key and plane and first and live and hkey and hval):
        raise MemoryError()
    for i in range(hcap):
        hval[i] = 0
    for i in range(c.head, c.tail):
        if c.live[i]:
            key[j], plane[j], first[j], live[j] = c.key[i], c.plane[i], c.first[i], True
            j += 1
    free(c.key)
    free(c.plane)
    free(c.first)
    free(c.live)
    free(c.hkey)
    free(c.hval)
    c.key, c.plane, c.first, c.live, c.hkey, c.hval = key, plane, first, live, hkey, hval
    c.cap, c.hcap, c.head, c.tail, c.count = cap, hcap, 0, j, j
    for i in range(j):
        k = _hslot(c, key[i])
        while c.hval[k] != 0:
            k = (k + 1) & (hcap - 1)
        c.hkey[k] = key[i]
        c.hval[k] = i + 1
    return 0


cdef int charged_set(Charged* c, int64_t psn, int plane, int64_t first) except -1:
    """charged[psn] = (plane, first): in place if it is there (a dict keeps a key's place)."""
    cdef Py_ssize_t s = charged_find(c, psn), k
    if s >= 0:
        c.plane[s] = plane
        c.first[s] = first
        return 0
    if c.tail == c.cap or 4 * (c.tail - c.head + 1) > c.hcap:
        _charged_rebuild(c, c.count + 1)
    s = c.tail
    c.tail += 1
    c.key[s], c.plane[s], c.first[s], c.live[s] = psn, plane, first, True
    c.count += 1
    k = _hslot(c, psn)
    while c.hval[k] > 0:
        k = (k + 1) & (c.hcap - 1)
    c.hkey[k] = psn
    c.hval[k] = s + 1
    return 0


cdef void charged_drop(Charged* c, Py_ssize_t s) noexcept:
    """Forget slot s."""
    cdef int64_t psn = c.key[s]
    cdef Py_ssize_t k = _hslot(c, psn)
    while c.hval[k] != 0:
        if c.hval[k] == s + 1:
            c.hval[k] = -1
            break
        k = (k + 1) & (c.hcap - 1)
    c.live[s] = False
    c.count -= 1
    while c.head < c.tail and not c.live[c.head]:
        c.head += 1


cdef void charged_free(Charged* c) noexcept:
    free(c.key)
    free(c.plane)
    free(c.first)
    free(c.live)
    free(c.hkey)
    free(c.hval)


cdef struct Beyond:     # the PSNs received above the cumulative one (a set): one bit each, by PSN
    uint64_t* w
    int64_t nbits       # a power of two: every member lies in (expected, expected + nbits)
    int64_t count       # members: none (delivery in order), and an ACK has no bitmap to fill


cdef inline bint beyond_has(Beyond* b, int64_t expected, int64_t psn) noexcept:
    if psn <= expected or psn - expected >= b.nbits:
        return False
    cdef int64_t j = psn & (b.nbits - 1)
    return (b.w[j >> 6] >> (j & 63)) & 1


cdef int beyond_add(Beyond* b, int64_t expected, int64_t psn) except -1:
    cdef int64_t old = b.nbits, j, nbits, p
    cdef uint64_t* w
    cdef uint64_t* ow = b.w
    if psn - expected >= old:
        nbits = max(<int64_t>1024, old)
        while psn - expected >= nbits:
            nbits *= 2
        w = <uint64_t*>malloc((nbits >> 6) * sizeof(uint64_t))
        if w == NULL:
            raise MemoryError()
        memset(w, 0, (nbits >> 6) * sizeof(uint64_t))
        for j in range(old):
            if (ow[j >> 6] >> (j & 63)) & 1:
                p = expected + 1 + ((j - (expected + 1)) & (old - 1))
                w[(p & (nbits - 1)) >> 6] |= 1ULL << ((p & (nbits - 1)) & 63)
        free(ow)
        b.w = w
        b.nbits = nbits
    j = psn & (b.nbits - 1)
    b.w[j >> 6] |= 1ULL << (j & 63)
    b.count += 1
    return 0


cdef inline void beyond_discard(Beyond* b, int64_t psn) noexcept:
    cdef int64_t j = psn & (b.nbits - 1)
    b.w[j >> 6] &= ~(1ULL << (j & 63))
    b.count -= 1


cdef inline int64_t unwrap(int64_t wire_psn, int64_t near) noexcept:
    cdef int64_t delta = (wire_psn - near) & PSN_MASK
    if delta >= 1 << 23:
        delta -= 1 << 24
    return near + delta


# -- congestion control (emu.roce.cc) ----------------------------------------------------------------------

cdef class Cc:
    """emu.roce.cc's CongestionControl ("none") or Dcqcn, compiled; Python reads rate and cnps."""

    cdef readonly str name
    cdef public double line_rate, rate
    cdef public int64_t cnps
    cdef public int64_t cnp_interval
    cdef bint dcqcn
    cdef int64_t alpha_period, increase_period
    cdef double g, ai_fraction, hai_fraction, min_rate_fraction
    cdef int fast_recovery_steps
    cdef public double alpha, target
    cdef public int64_t last_cnp, last_alpha, last_increase
    cdef public int stage

    def __init__(self, str name, double line_rate):

        ref = make(name, line_rate)  # the reference's checks and defaults
        self.name = ref.name
        self.line_rate = line_rate
        self.rate = ref.rate
        self.cnps = 0
        self.cnp_interval = ref.cnp_interval
        self.dcqcn = name == "dcqcn"
        if self.dcqcn:
            p = DcqcnParams()
            self.g, self.alpha_period, self.increase_period = p.g, ref.alpha_period, ref.increase_period
            self.fast_recovery_steps = p.fast_recovery_steps
            self.ai_fraction, self.hai_fraction, self.min_rate_fraction = p.ai_fraction, p.hai_fraction, p.min_rate_fraction
            self.alpha = ref.alpha
            self.target = ref.target
            self.last_cnp, self.last_alpha, self.last_increase = ref.last_cnp, ref.last_alpha, ref.last_increase
            self.stage = ref.stage

    cdef void on_cnp(self, int64_t now) noexcept:
        self.cnps += 1
        if not self.dcqcn:
            return
        self.target = self.rate
        self.rate = pmax(self.line_rate * self.min_rate_fraction, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - self.g) * self.alpha + self.g
        self.last_cnp = now
        self.last_alpha = now
        self.last_increase = now
        self.stage = 0

    cdef void tick(self, int64_t now) noexcept:
        cdef double step
        if not self.dcqcn:
            return
        if self.last_alpha < 0:
            self.last_alpha = self.last_increase = now
            return
        while now - self.last_alpha >= self.alpha_period:
            self.last_alpha += self.alpha_period
            if self.last_cnp < 0 or self.last_alpha - self.last_cnp >= self.alpha_period:
                self.alpha *= 1 - self.g
        while now - self.last_increase >= self.increase_period:
            self.last_increase += self.increase_period
            self.stage += 1
            if self.stage > self.fast_recovery_steps:
                step = self.hai_fraction if self.stage > 2 * self.fast_recovery_steps else self.ai_fraction
                self.target = pmin(self.line_rate, self.target + step * self.line_rate)
            self.rate = pmin(self.line_rate, (self.rate + self.target) / 2)


# -- the device --------------------------------------------------------------------------------------------

cdef struct Timer:      # a parked queue pair's time (Device.timers, Device.sends_at)
    int64_t t
    Py_ssize_t slot

cdef struct Times:      # a heap of Timers, earliest first
    Timer* a
    Py_ssize_t n, cap


cdef int times_push(Times* h, int64_t t, Py_ssize_t slot) except -1:
    cdef Timer* a
    cdef Py_ssize_t i, up
    if h.n == h.cap:
        a = <Timer*>realloc(h.a, (2 * h.cap + 16) * sizeof(Timer))
        if a == NULL:
            raise MemoryError()
        h.a = a
        h.cap = 2 * h.cap + 16
    a = h.a
    i = h.n
    h.n += 1
    while i > 0:
        up = (i - 1) >> 1
        if a[up].t <= t:
            break
        a[i] = a[up]
        i = up
    a[i].t = t
    a[i].slot = slot
    return 0


cdef void times_pop(Times* h) noexcept:
    """The earliest entry out; the caller has read it."""
    cdef Timer* a = h.a
    h.n -= 1
    cdef Py_ssize_t n = h.n, i = 0, c
    if n == 0:
        return
    cdef Timer last = a[n]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and a[c + 1].t < a[c].t:
            c += 1
        if a[c].t < last.t:
            a[i] = a[c]
            i = c
        else:
            break
    a[i] = last

cdef struct Plane:      # when it is next free is the device's free_at, apart: every send scans all planes'
    int index
    uint8_t addr_b[16]
    uint8_t head[14]    # Ethernet: the switch port's MAC, the host's, IPv6
    bint healthy        # with weight, its bit in the device's ready (_mark): set both through _mark
    PyObject* sw        # the switch a frame enters (sends' FromHost, read once), borrowed (the FromHost in
                        # sends holds it); NULL: a Python send
    PyObject* sw_port   # the switch's Port it enters by, borrowed (the device's sw_ports holds it): not read
                        # by way of the switch and its list of ports, two more lines a frame
    int64_t losses
    int64_t probe_due
    int64_t probe_psn
    int64_t probe_at
    int64_t srtt
    int64_t base_rtt
    double loss_rate
    double weight
    int64_t tx_packets, tx_bytes, rx_packets, retransmits, probes, tx_after_down, downs, spurious, trims, excluded


cdef struct MR:
    uint64_t va
    uint32_t rkey
    int64_t size
    uint8_t* buf


cdef class PlaneView:
    """What Python code reads of a plane's identity (`dev.planes`)."""
    cdef readonly int index
    cdef readonly str addr
    cdef readonly bytes addr_b

    def __init__(self, int index, str addr, bytes addr_b):
        self.index, self.addr, self.addr_b = index, addr, addr_b


cdef class QueuePair:
    """emu.roce.transport.QueuePair, compiled."""

    # What a device's step reads of each of its queue pairs comes first, together: three or four cache
    # lines (an object is aligned to 16 bytes, not to a line), where in declaration order it was seven
    # (the planes' addresses between them). At thousands of devices a step finds none of them in the cache.
    cdef bint ack_due, window_full, sacked_since
    cdef bint ticks             # its congestion control has a clock (DCQCN): a step ticks it
    cdef Py_ssize_t slot        # its place in the device's qp_list, and its bit in `active`
    cdef int64_t ack_deadline, rto_check, next_send, ready_at, sacked
    cdef SegQ pending
    cdef Window inflight
    cdef PsnQ resend
    cdef readonly Cc cc
    cdef Device dev
    cdef readonly int qpn
    cdef public int remote_qpn
    cdef uint8_t rplanes[MAXP][16]
    cdef public list remote_addrs
    cdef int64_t next_psn
    cdef int64_t cum_acked
    cdef WrQ wrs
    cdef public int64_t srtt
    cdef public int64_t retransmits, timeouts, trim_nacks
    cdef int64_t last_trim_cut
    cdef Charged charged
    cdef list _rate_trace
    cdef int64_t highest_sacked
    cdef int64_t reo_wnd, cum_at
    cdef int64_t recover_psn
    cdef public object error
    cdef int64_t expected, newest
    cdef Beyond beyond
    cdef int64_t ack_unsent
    cdef int ack_plane
    cdef int64_t last_cnp
    cdef public int64_t cnps_sent, bad, rx_bytes
    cdef dict imm_wait
    cdef list _rx_trace
    # Parked (Device.parked), last: a ring's queue pairs never are, and what a step reads stays where it was
    cdef bint has_entry         # an entry of the device's timers stands for it: the one at park_t
    cdef bint has_send          # an entry of the device's sends_at stands for it: the one at send_t
    cdef int64_t park_t, send_t

    def __cinit__(self):
        memset(&self.pending, 0, sizeof(SegQ))
        memset(&self.inflight, 0, sizeof(Window))
        memset(&self.wrs, 0, sizeof(WrQ))
        memset(&self.resend, 0, sizeof(PsnQ))
        memset(&self.charged, 0, sizeof(Charged))
        memset(&self.beyond, 0, sizeof(Beyond))

    def __init__(self, Device dev, int qpn, Cc cc):
        self.dev = dev
        self.qpn = qpn
        self.cc = cc
        self.ticks = cc.dcqcn
        self.remote_qpn = -1
        self.remote_addrs = []
        self.next_psn = 0
        self.sacked = 0
        self.cum_acked = -1
        self.cum_at = 0
        self.recover_psn = -1
        self.next_send = 0
        self.ready_at = 0
        self.window_full = False
        self.srtt = 0
        self.retransmits = 0
        self.timeouts = 0
        self.trim_nacks = 0
        self.last_trim_cut = -1
        self._rate_trace = []
        self.highest_sacked = -1
        self.sacked_since = False
        self.reo_wnd = 0
        self.rto_check = 0
        self.error = None
        self.expected = 0
        self.newest = -1
        self.beyond.nbits = 1024
        self.beyond.w = <uint64_t*>malloc(1024 // 8)
        memset(self.beyond.w, 0, 1024 // 8)
        self.ack_due = False
        self.ack_unsent = 0
        self.ack_deadline = 0
        self.ack_plane = 0
        self.has_entry = False
        self.park_t = 0
        self.has_send = False
        self.send_t = 0
        self.last_cnp = -1
        self.cnps_sent = 0
        self.bad = 0
        self.rx_bytes = 0
        self.imm_wait = {}
        self._rx_trace = []

    def __dealloc__(self):
        segq_clear(&self.pending)
        free(self.pending.a)
        win_clear(&self.inflight)
        free(self.inflight.a)
        while self.wrs.n:
            seg_unref(self.wrs.a[self.wrs.head].last)
            self.wrs.head = (self.wrs.head + 1) & (self.wrs.cap - 1)
            self.wrs.n -= 1
        free(self.wrs.a)
        free(self.resend.a)
        charged_free(&self.charged)
        free(self.beyond.w)

    @property
    def rate_trace(self):
        return self._rate_trace

    @property
    def rx_trace(self):
        return self._rx_trace

    def connect(self, int remote_qpn, list remote_addrs):

        if len(remote_addrs) != self.dev.nplanes:
            raise RoceError(f"the peer has {len(remote_addrs)} planes, this device {self.dev.nplanes}")
        self.remote_qpn = remote_qpn
        self.remote_addrs = list(remote_addrs)
        cdef bytes b
        for i, a in enumerate(remote_addrs):
            b = wire.ip6(a)
            memcpy(self.rplanes[i], <char*>b, 16)

    def post_write(self, int64_t wr_id, mr, int64_t offset, int64_t length, uint64_t remote_va, uint32_t rkey,
                   imm=None, bint signaled=True):
        if self.remote_qpn < 0:
            raise RoceError("the queue pair is not connected")
        if self.error:
            self.dev.cq.append(Completion(wr_id, f"flushed: {self.error}", 0, self.qpn))
            return
        if offset < 0 or length < 0 or offset + length > mr.size:
            raise RoceError(f"write of {length} B at {offset} is outside the {mr.size} B region")
        self.c_post_write(wr_id, self.dev.buffer_of(mr), offset, length, remote_va, rkey, imm is not None,
                          0 if imm is None else (<uint64_t>imm) & 0xFFFFFFFF, signaled)

    cdef int c_post_write(self, int64_t wr_id, uint8_t* base, int64_t offset, int64_t length, uint64_t remote_va,
                          uint32_t rkey, bint has_imm, uint32_t imm, bint signaled=True) except -1:
        """post_write's work, its checks done: the write's segments queued, its work request noted. Unsignaled
        (a ring's writes, whose completions nobody reads: it waits for its queue pair to be idle), the request
        completes without a Completion (one object a message, kept till the operation's end); a failed one
        still reports, as ibverbs' do."""
        if not self.pending.n:
            self.ready_at = self.dev.sched.cclock()
        self.dev._activate(self)
        cdef int mtu = self.dev.mtu
        cdef bint first = True
        cdef int64_t pos = 0
        cdef int n
        cdef Seg* seg = NULL
        while first or pos < length:
            n = <int>(mtu if mtu < length - pos else length - pos)
            seg = <Seg*>malloc(sizeof(Seg))
            if seg == NULL:
                raise MemoryError()
            seg.psn = -1
            seg.va = remote_va + pos
            seg.rkey = rkey
            seg.data = base + offset + pos
            seg.length = n
            seg.wr = wr_id
            seg.plane = -1
            seg.sent_at = 0
            seg.sends = 0
            seg.acked = False
            seg.has_imm = False
            seg.imm = 0
            seg.refs = 1
            segq_push(&self.pending, seg)
            pos += n
            first = False
        if has_imm:
            seg.has_imm = True
            seg.imm = imm
        wrq_push(&self.wrs, wr_id, seg_ref(seg), length, signaled)
        return 0

    cdef inline bint c_busy(self) noexcept:
        return self.pending.n > 0 or self.inflight.n > 0

    def busy(self):
        return self.c_busy()

    def idle(self):
        return not self.c_busy()

    def cancel(self):
        segq_clear(&self.pending)
        self._clear_wrs()
        self.dev._activate(self)  # no data waiting for a plane any more: the next step finds what it has left

    cdef void _clear_wrs(self) noexcept:
        while self.wrs.n:
            seg_unref(self.wrs.a[self.wrs.head].last)
            self.wrs.head = (self.wrs.head + 1) & (self.wrs.cap - 1)
            self.wrs.n -= 1

    def fail(self, str why):

        self.error = why
        cdef Py_ssize_t i
        for i in range(self.wrs.n):
            self.dev.cq.append(Completion(self.wrs.a[(self.wrs.head + i) & (self.wrs.cap - 1)].wr_id, why, 0, self.qpn))
        self._clear_wrs()
        segq_clear(&self.pending)
        win_clear(&self.inflight)
        self.resend.n = 0
        self.sacked = 0
        self.dev._activate(self)  # not waiting on its timers any more: the next step finds it idle

    def describe_oldest(self):
        """(PSN, sends, plane, sent_at, acked) of the oldest segment in flight, or None."""
        if not self.inflight.n:
            return None
        cdef Seg* s = win_at(&self.inflight, 0)
        return s.psn, s.sends, s.plane, s.sent_at, bool(s.acked)

    @property
    def pending_count(self):
        return self.pending.n

    @property
    def inflight_count(self):
        return self.inflight.n

    @property
    def cum_acked_psn(self):
        return self.cum_acked

    @property
    def highest_sacked_psn(self):
        return self.highest_sacked

    @property
    def next_send_at(self):
        return self.next_send


cdef class Device:
    """emu.roce.transport.Device on the fabric clock (its FabricIO), compiled."""

    cdef public object clock
    cdef Schedule sched
    cdef public str spray
    cdef public bint payload  # False (headers only): what arrives is counted, not written; zeros are sent in
                              # place of a region's bytes, which are not read (the reference reads them)
    cdef bint weighted
    cdef object retry_limit_obj
    cdef int64_t retry_limit
    cdef public int64_t alarm_at
    cdef public object trim_dscp
    cdef int c_trim_dscp
    cdef int tc_data
    cdef int64_t burst, min_probe
    cdef public int mtu
    cdef public int window
    cdef public str cc_name
    cdef public double plane_rate
    cdef int64_t wire_rate, rto, rtt_hint, ack_delay, reorder_budget
    cdef public object rng
    cdef int nplanes
    # What a send and a step scan, kept apart from the planes (a plane is 200 bytes; these are two or three
    # lines for all of them): when each is next free, and a bit for each that is healthy and has weight (_mark).
    # At thousands of devices the planes are not in the cache, and a scan read two lines of each.
    cdef int64_t free_at[MAXP]
    cdef uint32_t ready, all_ready
    cdef readonly list planes
    cdef list sends          # per plane: a FromHost (the switch port's NIC, compiled) or a Python send(frame)
    cdef list sw_ports       # the Ports the planes hold borrowed, held here too (a list of ports set anew)
    cdef readonly dict qps
    cdef Table by_qpn        # the same queue pairs by number, for a frame's look-up (no int made, no dict);
                             # borrowed: qp_list, which only grows, holds every one
    cdef list qp_list
    # A bit for each queue pair of qp_list that may have work (set where it gets some, cleared by the step
    # that finds it has none): a step and c_busy read those alone, in list order. A device of a direct
    # alltoall holds a queue pair for every other rank, each idle once its share is acknowledged; other
    # plans' devices hold some that are idle for whole steps of the plan.
    cdef uint64_t* active
    cdef Py_ssize_t active_words
    cdef readonly dict mrs
    cdef MR* mr_c
    cdef int nmr
    cdef bint parks
    cdef list buffers        # the regions' buffers, held while the device points into them
    cdef public object cq, recv_cq
    cdef int64_t c_bad_icrc, c_truncated, c_unknown_qp, c_nak_sent, c_ce_marked, c_duplicates, c_trimmed
    cdef int64_t next_sample
    cdef list _plane_trace
    cdef Late* c_send_late
    cdef Late* c_recv_late
    cdef Plane planes_c[MAXP]  # 3.2 KB, which a step's scans do not read while every plane is usable
    # A queue pair whose only work is a time it waits for (its ACK's deadline, its recovery check) or a
    # plane (data to send, its window open) is parked instead: its bit in `parked`, its time in `timers`,
    # and if it has data to send, its bit in `wanting` and its next send's instant in `sends_at` (heaps of
    # (time, slot), some entries stale: the queue pair is not parked any more, or was parked again at
    # another time). A step makes the ones whose time is due active again, visits the wanting ones in list
    # order while a plane is free (the reference's visit of one finds none free and does nothing), and takes
    # the earliest of the others' times into its wake-up, as the reference's pass over every queue pair
    # does; a frame for a queue pair makes it active (what it carries may change any of them). In a direct
    # alltoall most queue pairs have packets in flight, or data waiting for a plane, most of the run.
    # Only a device with more than a word of queue pairs parks them (`parks`, beside nmr: in its padding, so
    # that nothing a frame or a step reads moves): a ring's device has two.
    cdef uint64_t* parked
    cdef uint64_t* wanting
    cdef Times timers, sends_at

    def __cinit__(self):
        self.c_send_late = <Late*>malloc(sizeof(Late))
        self.c_recv_late = <Late*>malloc(sizeof(Late))
        memset(self.c_send_late, 0, sizeof(Late))
        memset(self.c_recv_late, 0, sizeof(Late))
        self.mr_c = NULL
        self.nmr = 0

    def __init__(self, list addrs, *, double plane_rate_bps=100e9, int mtu=1024, str cc="none",
                 int window=512, double rto_fabric_s=200e-6, seed=None, clock=None, io=None, trim_dscp=None,
                 str spray="weighted", retry_limit=None, double rtt_hint_fabric_s=0.0, bint payload=True):
        import random


        if not addrs:
            raise RoceError("a device needs at least one port (plane address)")
        if spray not in SPRAYS:
            raise RoceError(f"spray is one of {', '.join(SPRAYS)}, not {spray!r}")
        if io is None:
            raise RoceError("the compiled device's ports are the engine's (FabricIO, on either clock): kernel "
                            "sockets are the Python device's")
        if len(addrs) > MAXP:
            raise RoceError(f"the compiled device has at most {MAXP} planes, not {len(addrs)}")
        self.spray = spray
        self.payload = payload
        self.weighted = spray == "weighted"
        self.retry_limit_obj = retry_limit
        self.retry_limit = -1 if retry_limit is None else retry_limit
        self.alarm_at = NEVER
        self.trim_dscp = trim_dscp
        self.c_trim_dscp = -1 if trim_dscp is None else trim_dscp
        self.tc_data = TC_DATA if trim_dscp is None else TC_DATA_TRIMMABLE
        self.clock = clock
        self.sched = <Schedule?>clock.sched
        self.burst = 0  # FabricIO's: every send woken when it is due
        self.min_probe = 0
        self.mtu = mtu
        self.window = window
        self.cc_name = cc
        self.plane_rate = plane_rate_bps
        self.wire_rate = c_rate_of(plane_rate_bps)
        self.rto = c_to_ps(rto_fabric_s)
        self.rtt_hint = c_to_ps(rtt_hint_fabric_s)
        self.ack_delay = ACK_DELAY_PS
        self.reorder_budget = c_ser_ps(SACK_BITS * (mtu + HEADERS), self.wire_rate) // len(addrs)
        self.rng = random.Random(seed)
        self.nplanes = len(addrs)
        self.planes = []
        cdef int i
        cdef Plane* p
        cdef bytes b, h
        for i, a in enumerate(addrs):
            b = wire.ip6(a)
            self.planes.append(PlaneView(i, a, b))
            p = &self.planes_c[i]
            memset(p, 0, sizeof(Plane))
            p.index = i
            memcpy(p.addr_b, <char*>b, 16)
            h = io.head[i]
            memcpy(p.head, <char*>h, 14)
            self.free_at[i] = 0
            p.healthy = True
            p.losses = 0
            p.probe_due = 0
            p.probe_psn = -1
            p.probe_at = -1
            p.srtt = 0
            p.base_rtt = NEVER
            p.loss_rate = 0.0
            p.weight = 1.0
            self._mark(p)
        self.all_ready = self.ready
        self.sends = list(io.send)
        self.sw_ports = []
        for i in range(self.nplanes):
            target = self.sends[i]
            if type(target) is FromHost:
                ports = (<FromHost>target).sw.ports
                if not 0 <= (<FromHost>target).port < len(ports):
                    raise ValueError(f"plane {i}: switch port {(<FromHost>target).port} does not exist")
                port = ports[(<FromHost>target).port]
                self.sw_ports.append(port)
                self.planes_c[i].sw = <PyObject*>(<FromHost>target).sw
                self.planes_c[i].sw_port = <PyObject*>port
            else:
                self.planes_c[i].sw = NULL
        self.qps = {}
        self.by_qpn = Table(True)
        self.qp_list = []
        self.mrs = {}
        self.buffers = []
        self.cq = deque()
        self.recv_cq = deque()
        self.c_bad_icrc = self.c_truncated = self.c_unknown_qp = self.c_nak_sent = 0
        self.c_ce_marked = self.c_duplicates = self.c_trimmed = 0
        self.next_sample = 0
        self._plane_trace = []

    def __dealloc__(self):
        free(self.c_send_late)
        free(self.c_recv_late)
        free(self.mr_c)
        free(self.active)
        free(self.parked)
        free(self.wanting)
        free(self.timers.a)
        free(self.sends_at.a)

    # -- what Python reads ----------------------------------------------------------------------------

    @property
    def counters(self):
        return {"bad_icrc": self.c_bad_icrc, "truncated": self.c_truncated, "unknown_qp": self.c_unknown_qp,
                "nak_sent": self.c_nak_sent, "ce_marked": self.c_ce_marked, "duplicates": self.c_duplicates,
                "trimmed": self.c_trimmed}

    @property
    def plane_trace(self):
        return self._plane_trace

    @property
    def send_late(self):
        return late_object(self.c_send_late)

    @property
    def recv_late(self):
        return late_object(self.c_recv_late)

    def reset_fidelity(self):
        memset(self.c_send_late, 0, sizeof(Late))
        memset(self.c_recv_late, 0, sizeof(Late))

    def fidelity(self, str name):
        from dataclasses import asdict

        from emu.fidelity import Part

        return [asdict(Part.from_summary(f"endpoint {name} send", "endpoint", self.send_late.summary(), paced=True)),
                asdict(Part.from_summary(f"endpoint {name} receive", "endpoint", self.recv_late.summary()))]

    def plane_stats(self):
        out = []
        cdef Plane* p
        for i in range(self.nplanes):
            p = &self.planes_c[i]
            out.append({"plane": p.index, "addr": self.planes[i].addr, "healthy": bool(p.healthy),
                        "weight": round(p.weight, 4), "srtt_fabric_s": c_to_s(p.srtt),
                        "loss_rate": round(p.loss_rate, 5), "tx_packets": p.tx_packets, "tx_bytes": p.tx_bytes,
                        "rx_packets": p.rx_packets, "retransmits": p.retransmits, "probes": p.probes,
                        "tx_after_down": p.tx_after_down, "downs": p.downs, "spurious_retransmits": p.spurious,
                        "trims": p.trims, "excluded": p.excluded})
        return out

    def describe(self):
        now = self.sched.cclock()
        qps = []
        for qp in self.qp_list:
            if not qp.busy():
                continue
            text = f"QP {qp.qpn:#x}: {qp.pending_count} pending, {qp.inflight_count} in flight"
            old = qp.describe_oldest()
            if old is not None:
                psn, sends, plane, sent_at, acked = old
                text += (f" (oldest PSN {psn}, sent {sends} times, last on plane {plane} "
                         f"{c_to_s(now - sent_at):.2f} s ago{', SACKed' if acked else ''})")
            text += (f", acked to {qp.cum_acked_psn}, highest SACKed {qp.highest_sacked_psn}, srtt "
                     f"{_ms(qp.srtt)} ms, RTO {_ms(max(self.rto, 4 * (qp.srtt or self.rtt_hint) + self.ack_delay))} ms, "
                     f"next send in {_ms(qp.next_send_at - now)} ms, {qp.retransmits} retransmits")
            qps.append(text)
        planes = ", ".join(f"plane {self.planes_c[i].index} {'up' if self.planes_c[i].healthy else 'down'} "
                           f"(losses {self.planes_c[i].losses}, free in "
                           f"{_ms(self.free_at[i] - now)} ms)" for i in range(self.nplanes))
        return f"{'; '.join(qps)}; {planes}"

    # -- resources ------------------------------------------------------------------------------------

    cdef uint8_t* buffer_of(self, mr) except NULL:
        """Where a region's bytes lie (held: a bytearray with a buffer exported cannot be resized)."""
        cdef Py_buffer view
        cdef int i
        for i in range(len(self.buffers)):
            if self.buffers[i][0] is mr.buf:
                return <uint8_t*><uintptr_t>self.buffers[i][1]
        PyObject_GetBuffer(mr.buf, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        cdef uintptr_t ptr = <uintptr_t>view.buf
        self.buffers.append((mr.buf, ptr, memoryview(mr.buf)))
        PyBuffer_Release(&view)
        return <uint8_t*>ptr

    def reg_mr(self, int64_t size):

        mr = MemoryRegion(va=self.rng.randrange(1 << 20, 1 << 40) << 12, rkey=self.rng.randrange(1, 1 << 32),
                          buf=zeroed(size))
        self.mrs[mr.rkey] = mr
        self.mr_c = <MR*>realloc(self.mr_c, (self.nmr + 1) * sizeof(MR))
        self.mr_c[self.nmr].va = mr.va
        self.mr_c[self.nmr].rkey = mr.rkey
        self.mr_c[self.nmr].size = size
        self.mr_c[self.nmr].buf = self.buffer_of(mr)
        self.nmr += 1
        return mr

    def create_qp(self):
        cdef QueuePair qp
        cdef uint64_t* words
        qpn = self.rng.randrange(0x100, 0xFFFFFF)
        while qpn in self.qps:  # a number taken would take the other's frames (the reference draws alike)
            qpn = self.rng.randrange(0x100, 0xFFFFFF)
        qp = QueuePair(self, qpn, Cc(self.cc_name, self.plane_rate * self.nplanes))
        qp.slot = len(self.qp_list)
        self.parks = qp.slot >= 64
        if qp.slot == self.active_words * 64:  # first, so that a failure leaves nothing half made
            words = <uint64_t*>realloc(self.active, (self.active_words + 1) * sizeof(uint64_t))
            if words == NULL:
                raise MemoryError()
            words[self.active_words] = 0
            self.active = words
            words = <uint64_t*>realloc(self.parked, (self.active_words + 1) * sizeof(uint64_t))
            if words == NULL:
                raise MemoryError()
            words[self.active_words] = 0
            self.parked = words
            words = <uint64_t*>realloc(self.wanting, (self.active_words + 1) * sizeof(uint64_t))
            if words == NULL:
                raise MemoryError()
            words[self.active_words] = 0
            self.wanting = words
            self.active_words += 1
        self.by_qpn.put(0, qpn, qp)
        self.qps[qpn] = qp
        self.qp_list.append(qp)
        if qp.ticks:  # a clock ticks at every step, as the reference's, from its first: never idle
            self._activate(qp)
        return qp

    def close(self):
        pass

    def alarm(self, int64_t at):
        self.alarm_at = imin(self.alarm_at, at)

    def poll_cq(self):
        out = list(self.cq)
        self.cq.clear()
        return out

    def poll_recv(self):
        out = list(self.recv_cq)
        self.recv_cq.clear()
        return out

    def has_recv(self):
        return len(self.recv_cq) > 0

    def ring_op(self, ring, list runs, int64_t chunk):
        """A ring's steps run compiled (RingOp): what emu.collectives.rank.Ring.ring yields on this device;
        `runs` as emu.collectives.ringsteps.RingSteps holds them."""
        return RingOp(self, ring, runs, chunk)

    def idle(self):
        return not self.c_busy()

    cdef bint c_busy(self) noexcept:
        cdef QueuePair qp
        cdef Py_ssize_t w
        cdef uint64_t bits
        for w in range(self.active_words):
            bits = self.active[w] | (self.parked[w] if self.parks else 0)
            while bits:
                qp = <QueuePair><object>PyList_GET_ITEM(self.qp_list, w * 64 + __builtin_ctzll(bits))
                if qp.c_busy():
                    return True
                bits &= bits - 1
        return False

    cdef inline void _activate(self, QueuePair qp) noexcept:
        """qp may have work: the next step visits it."""
        cdef uint64_t bit = (<uint64_t>1) << (qp.slot & 63)
        self.active[qp.slot >> 6] |= bit
        if self.parks:
            self.parked[qp.slot >> 6] &= ~bit
            self.wanting[qp.slot >> 6] &= ~bit

    cdef inline bint _is_parked(self, Py_ssize_t slot) noexcept:
        return (self.parked[slot >> 6] >> (slot & 63)) & 1

    cdef int _settle(self, QueuePair qp) except -1:
        """After the step's visit: qp idle (no bit), parked on its times (and wanting a plane), or active."""
        cdef Py_ssize_t w = qp.slot >> 6
        cdef uint64_t bit = (<uint64_t>1) << (qp.slot & 63)
        cdef int64_t t
        if not (qp.ack_due or qp.ticks or qp.resend.n or qp.inflight.n or qp.pending.n or qp.window_full):
            self.active[w] &= ~bit
            if self.parks:
                self.parked[w] &= ~bit
                self.wanting[w] &= ~bit
            return 0
        if not self.parks:
            return 0  # it stays active
        # a closed window not yet marked full stays active: the visit that marks it is the reference's
        if (qp.ticks or qp.resend.n or (qp.sacked_since and qp.inflight.n)  # SACKs are read with packets in flight
                or (qp.pending.n and not qp.window_full and qp.inflight.n - qp.sacked >= self.window)):
            self.active[w] |= bit
            self.parked[w] &= ~bit
            self.wanting[w] &= ~bit
            return 0
        self.active[w] &= ~bit
        self.parked[w] |= bit
        t = imin(qp.ack_deadline if qp.ack_due else NEVER, qp.rto_check if qp.inflight.n else NEVER)
        if t == NEVER:  # no time to wait for (data waiting for a plane alone): an entry left is stale
            qp.has_entry = False
        elif not (qp.has_entry and qp.park_t == t):
            times_push(&self.timers, t, qp.slot)
            qp.park_t = t
            qp.has_entry = True
        if qp.pending.n and not qp.window_full:
            self.wanting[w] |= bit
            if not (qp.has_send and qp.send_t == qp.next_send):
                times_push(&self.sends_at, qp.next_send, qp.slot)
                qp.send_t = qp.next_send
                qp.has_send = True
        else:
            self.wanting[w] &= ~bit
        return 0

    cdef bint _timers_head(self) noexcept:
        """Drops stale entries from the front of the timers: true if one is left, the earliest then a parked
        queue pair's own time."""
        cdef QueuePair qp
        cdef Timer* e
        while self.timers.n:
            e = &self.timers.a[0]
            qp = <QueuePair><object>PyList_GET_ITEM(self.qp_list, e.slot)
            if qp.has_entry and qp.park_t == e.t:
                if self._is_parked(e.slot):
                    return True
                qp.has_entry = False
            times_pop(&self.timers)
        return False

    cdef bint _sends_head(self) noexcept:
        """Drops stale entries from the front of sends_at: true if one is left, the earliest then a wanting
        queue pair's next send."""
        cdef QueuePair qp
        cdef Timer* e
        while self.sends_at.n:
            e = &self.sends_at.a[0]
            qp = <QueuePair><object>PyList_GET_ITEM(self.qp_list, e.slot)
            if qp.has_send and qp.send_t == e.t:
                if (self.wanting[e.slot >> 6] >> (e.slot & 63)) & 1:
                    return True
                qp.has_send = False
            times_pop(&self.sends_at)
        return False

    cdef void _unpark_due(self, int64_t now) noexcept:
        """The parked queue pairs whose time is at or before `now` active again, for the step's pass."""
        cdef QueuePair qp
        while self._timers_head() and self.timers.a[0].t <= now:
            qp = <QueuePair><object>PyList_GET_ITEM(self.qp_list, self.timers.a[0].slot)
            qp.has_entry = False
            self._activate(qp)
            times_pop(&self.timers)

    # -- the crank -------------------------------------------------------------------------------------

    def step(self, now_):
        cdef int64_t now = ps_of(now_)
        return self.c_step(now)

    cdef int64_t c_step(self, int64_t now) except? -1:
        cdef QueuePair qp
        cdef Plane* p
        cdef int i
        cdef bint any_sent, sends = False
        cdef int64_t due = NEVER, first_send = NEVER
        cdef Py_ssize_t w
        cdef uint64_t bits
        cdef int b
        if now >= self.alarm_at:
            self.alarm_at = NEVER
        if now >= self.next_sample:
            self.next_sample = now + SAMPLE_EVERY
            for qp in self.qp_list:
                if qp.rx_bytes and (not qp._rx_trace or qp._rx_trace[len(qp._rx_trace) - 1][1] != qp.rx_bytes):
                    qp._rx_trace.append((c_to_s(now), qp.rx_bytes))
                if qp.c_busy() and (not qp._rate_trace or qp._rate_trace[len(qp._rate_trace) - 1][1] != qp.cc.rate):
                    qp._rate_trace.append((c_to_s(now), qp.cc.rate))
            any_sent = False
            for i in range(self.nplanes):
                if self.planes_c[i].tx_bytes:
                    any_sent = True
            if any_sent:
                sent = [self.planes_c[i].tx_bytes for i in range(self.nplanes)]
                if not self._plane_trace or self._plane_trace[len(self._plane_trace) - 1][1] != sent:
                    self._plane_trace.append((c_to_s(now), sent))
        if self.parks:
            self._unpark_due(now)  # the parked ones due now join the pass
        # One pass over the queue pairs that may have work (`active`, in list order, as the reference visits
        # all: an idle one does nothing in either of its passes): each acts, then gives what it waits for.
        # The reference finds the latter in a second pass, after _probe_planes; the same values, as nothing
        # later in the step writes a queue pair's fields read here (another's actions, a probe and a failure
        # write its own, the planes, or its SACK record). Sends wait for the earliest free plane, the same
        # for all: max(first, free_at).
        for w in range(self.active_words):
            bits = self.active[w]
            if self.parks and self.wanting[w] and self._pick_plane(now, -1) != NULL:
                bits |= self.wanting[w]
            while bits:
                b = __builtin_ctzll(bits)
                qp = <QueuePair><object>PyList_GET_ITEM(self.qp_list, w * 64 + b)
                if qp.ack_due and now >= qp.ack_deadline:
                    self._send_ack(qp, SYNDROME_ACK, -1, False, -1, False)
                if qp.ticks:
                    qp.cc.tick(now)
                if qp.resend.n:
                    self._resend(qp, now)
                if qp.inflight.n and (qp.sacked_since or now >= qp.rto_check):  # the reference's _recover returns else
                    self._recover(qp, now)
                if qp.pending.n or qp.window_full:  # else neither has _send_data
                    self._send_data(qp, now)
                if (qp.pending.n and qp.inflight.n - qp.sacked < self.window) or qp.resend.n:
                    sends = True
                    first_send = imin(first_send, qp.next_send)
                if qp.ack_due:
                    due = imin(due, qp.ack_deadline)
                if qp.inflight.n:
                    due = imin(due, qp.rto_check)
                self._settle(qp)
                # the bits after b as they are now (none is set during a step today; one that were would
                # still be visited in list order, as in the reference's loop); past b = 63 none: 2 << 63 is 0
                bits = self.active[w]
                if self.parks and self.wanting[w] and self._pick_plane(now, -1) != NULL:
                    bits |= self.wanting[w]
                bits &= ~((<uint64_t>2 << b) - 1)
        if self.parks:
            if self._timers_head():  # the parked ones' earliest time, as the pass over them would take it
                due = imin(due, self.timers.a[0].t)
            if self._sends_head():  # and the wanting ones' earliest next send
                sends = True
                first_send = imin(first_send, self.sends_at.a[0].t)
        self._probe_planes(now)
        if sends:
            i = self._earliest(-1)
            due = imin(due, imax(first_send, self.free_at[i] if i >= 0 else now))
        if self.ready != self.all_ready:
            for i in range(self.nplanes):
                if not self.ready >> i & 1:
                    due = imin(due, self.planes_c[i].probe_due)
        return imin(due, self.alarm_at)

    # -- sending -----------------------------------------------------------------------------------------

    cdef inline void _mark(self, Plane* p) noexcept:
        """Keeps p's bit in `ready` what its health and weight say, after either is written."""
        if p.healthy and p.weight:
            self.ready |= (<uint32_t>1) << p.index
        else:
            self.ready &= ~((<uint32_t>1) << p.index)

    cdef inline int _earliest(self, int avoid) noexcept:
        """The usable plane (ready, not `avoid`) free first, the lowest index among equals; -1 if none."""
        cdef int best = -1
        cdef int i
        for i in range(self.nplanes):
            if self.ready >> i & 1 and i != avoid and (best < 0 or self.free_at[i] < self.free_at[best]):
                best = i
        return best

    cdef Plane* _pick_plane(self, int64_t now, int avoid) noexcept:
        cdef int best = self._earliest(avoid)
        return &self.planes_c[best] if best >= 0 and self.free_at[best] <= now + self.burst else NULL

    cdef int _send(self, Plane* plane, int tclass, const uint8_t* dst, int sport, Packet* pkt) except -1:
        """One frame (Ethernet onward, built in pkt, its checksums owed) into the plane's switch port."""
        cdef uint8_t* f = pkt.data
        cdef int ulen = pkt.len - 54
        memcpy(f, plane.head, 14)
        f[14] = 0x60 | (tclass >> 4)
        f[15] = (tclass & 0x0F) << 4
        f[16] = 0
        f[17] = 0
        f[18] = ulen >> 8
        f[19] = ulen & 0xFF
        f[20] = 17
        f[21] = 64
        memcpy(f + 22, plane.addr_b, 16)
        memcpy(f + 38, dst, 16)
        f[54] = sport >> 8
        f[55] = sport & 0xFF
        f[56] = ROCE_PORT >> 8
        f[57] = ROCE_PORT & 0xFF
        f[58] = ulen >> 8
        f[59] = ulen & 0xFF
        f[60] = 0
        f[61] = 0
        pkt.flags = PENDING
        if plane.sw != NULL:
            (<SwitchBase>plane.sw).c_host_frame(<Port>plane.sw_port, self.sched.now, pkt)
        else:
            target = self.sends[plane.index]
            frame = packet_bytes(pkt)
            packet_free(pkt)
            target(frame)
        return 0

    cdef Packet* _data_packet(self, QueuePair qp, Plane* plane, int sport, int64_t psn, uint64_t va, uint32_t rkey,
                              const uint8_t* payload, int n, bint ack_req, bint has_imm, uint32_t imm) except NULL:
        """wire.data_frame's bytes, after 62 bytes of Ethernet, IPv6 and UDP (filled by _send)."""
        cdef int body = DATA_HEADER + (IMM_BYTES if has_imm else 0) + n + ICRC_BYTES
        cdef Packet* pkt = packet_new(62 + body)
        if pkt == NULL:
            raise MemoryError()
        cdef uint8_t* b = pkt.data + 62
        cdef uint32_t qpf = qp.remote_qpn & PSN_MASK
        cdef uint32_t psnf = (<uint32_t>ack_req << 31) | <uint32_t>(psn & PSN_MASK)
        b[0] = OP_WRITE_ONLY_IMM if has_imm else OP_WRITE_ONLY
        b[1] = 0
        b[2] = 0xFF
        b[3] = 0xFF
        _be32(b + 4, qpf)
        _be32(b + 8, psnf)
        _be32(b + 12, <uint32_t>(va >> 32))
        _be32(b + 16, <uint32_t>(va & 0xFFFFFFFF))
        _be32(b + 20, rkey)
        _be32(b + 24, <uint32_t>n)
        cdef int off = DATA_HEADER
        if has_imm:
            _be32(b + 28, imm)
            off += IMM_BYTES
        if n:
            if self.payload:
                memcpy(b + off, payload, n)
            else:  # headers only: the region was never written, and reading it maps a page each 4 KiB
                memset(b + off, 0, n)
        return pkt

    cdef bint _usable_besides(self, int index) noexcept:
        return (self.ready & ~((<uint32_t>1) << index)) != 0 if 0 <= index < MAXP else self.ready != 0

    cdef bint _transmit(self, QueuePair qp, Seg* seg, Plane* plane, int64_t now) except -1:
        if plane.sw != NULL:  # the switch port's lines, asked for while the frame is built
            __builtin_prefetch(plane.sw_port)
            __builtin_prefetch(<char*>plane.sw_port + 64)
        cdef int64_t psn = seg.psn if seg.psn >= 0 else qp.next_psn
        cdef int k = psn % ENTROPY
        cdef Packet* pkt = self._data_packet(qp, plane, FABRIC_TX_PORT + k, psn, seg.va, seg.rkey, seg.data,
                                             seg.length, seg.sends > 0, seg.has_imm, seg.imm)
        self._send(plane, self.tc_data, qp.rplanes[plane.index], FABRIC_TX_PORT + k, pkt)
        if seg.psn < 0:
            seg.psn = psn
            qp.next_psn += 1
        cdef int64_t size = seg.length + HEADERS + (IMM_BYTES if seg.has_imm else 0)
        self.free_at[plane.index] = imax(self.free_at[plane.index], now) + share_ps(c_ser_ps(size, self.wire_rate),
                                                                                    plane.weight)
        cdef int64_t gap = c_ser_ps(size, c_rate_of(qp.cc.rate))
        qp.next_send = imax(qp.next_send, now - gap) + gap
        plane.tx_packets += 1
        plane.tx_bytes += seg.length
        if not plane.healthy:
            plane.tx_after_down += 1
        seg.plane = plane.index
        seg.sent_at = now
        seg.sends += 1
        win_put(&qp.inflight, seg)
        return True

    cdef int _send_data(self, QueuePair qp, int64_t now) except -1:
        cdef Plane* plane
        cdef int64_t due, horizon
        cdef Seg* seg
        if qp.window_full:
            if qp.inflight.n - qp.sacked >= self.window:
                return 0
            qp.window_full = False
            qp.ready_at = imax(qp.ready_at, now)
        horizon = now + self.burst
        if qp.pending.n and qp.inflight.n - qp.sacked >= self.window:
            qp.window_full = True
            return 0
        while qp.pending.n and qp.inflight.n - qp.sacked < self.window and qp.next_send <= horizon:
            plane = self._pick_plane(now, -1)
            if plane == NULL:
                return 0
            due = imax(imax(qp.next_send, self.free_at[plane.index]), qp.ready_at)
            seg = segq_front(&qp.pending)
            self._transmit(qp, seg, plane, now)
            seg_unref(segq_pop(&qp.pending))
            late_add(self.c_send_late, c_to_s(now - due) if now > due else 0.0)
        return 0

    cdef int64_t _probe_interval(self) noexcept:
        cdef int64_t srtt = 0
        cdef bint first = True
        cdef QueuePair qp
        for qp in self.qp_list:
            if first:
                srtt = qp.srtt
                first = False
            elif qp.srtt > srtt:
                srtt = qp.srtt
        return imax(4 * srtt + self.ack_delay if srtt != 0 else self.rto, self.min_probe)

    cdef int _recover(self, QueuePair qp, int64_t now) except -1:
        cdef int64_t rto, lost_at, backoff, first_sent, since
        cdef int64_t highest, reorder
        cdef Py_ssize_t i
        cdef Seg* seg
        cdef bint overtaken, timer, usable, was_first
        cdef Plane* lost_on
        cdef Plane* plane
        cdef int j
        cdef int64_t srtt_p
        qp.sacked_since = False  # the step calls this only with packets in flight and new SACKs or the check due
        rto = imax(self.rto, 4 * (qp.srtt if qp.srtt != 0 else self.rtt_hint) + self.ack_delay)
        qp.rto_check = now + rto // 4
        highest = qp.highest_sacked
        reorder = DUP_THRESH * self.nplanes if qp.pending.n else 1
        i = 0
        while i < qp.inflight.n:
            seg = win_at(&qp.inflight, i)
            i += 1
            since = (qp.cum_at if seg.sends == 1 and seg.psn > highest and qp.cum_at > seg.sent_at
                     and seg.psn > qp.recover_psn else seg.sent_at)
            if seg.psn > highest and now - since < rto:
                break
            if seg.acked:
                continue
            overtaken = False
            if highest - seg.psn >= reorder and qp.srtt > 0 and seg.sends == 1:
                srtt_p = self.planes_c[seg.plane].srtt
                lost_at = seg.sent_at + 2 * (srtt_p if srtt_p != 0 else qp.srtt) + self.ack_delay + qp.reo_wnd
                overtaken = now >= lost_at
                if not overtaken and lost_at < qp.rto_check:
                    qp.rto_check = lost_at
            backoff = rto * (1 << (seg.sends - 1 if seg.sends - 1 < 6 else 6))
            timer = now - since >= backoff
            if timer and self.retry_limit >= 0 and seg.sends > self.retry_limit:
                qp.fail("retry exceeded")
                return 0
            was_first = overtaken and seg.sends == 1
            if was_first or timer:
                lost_on = &self.planes_c[seg.plane]
                usable = self._usable_besides(seg.plane)
                plane = self._pick_plane(now, seg.plane if usable else -1)
                first_sent = seg.sent_at if seg.sends == 1 else -1
                if plane == NULL:
                    j = self._earliest(seg.plane if usable else -1)
                    qp.rto_check = imax(self.free_at[j] if j >= 0 else now, now + self.burst)
                    return 0
                self._transmit(qp, seg, plane, now)
                if timer and not (overtaken and seg.sends == 1):
                    qp.timeouts += 1
                    if qp.next_psn - 1 > qp.recover_psn:
                        qp.recover_psn = qp.next_psn - 1
                charged_set(&qp.charged, seg.psn, lost_on.index, first_sent)
                if qp.charged.count > CHARGED_KEPT:
                    charged_drop(&qp.charged, qp.charged.head)
                lost_on.losses += 1
                lost_on.loss_rate += (1.0 - lost_on.loss_rate) * LOSS_GAIN
                lost_on.retransmits += 1
                if lost_on.healthy and lost_on.losses >= LOSS_TO_DOWN and usable:  # never the last plane in use
                    lost_on.healthy = False
                    self._mark(lost_on)
                    lost_on.downs += 1
                    lost_on.probe_due = now + self._probe_interval()
                qp.retransmits += 1
        return 0

    cdef int _resend(self, QueuePair qp, int64_t now) except -1:
        cdef Seg* seg
        cdef Plane* plane
        while qp.resend.n:
            seg = win_get(&qp.inflight, qp.resend.a[qp.resend.head])
            if seg == NULL or seg.acked:
                qp.resend.head = (qp.resend.head + 1) & (qp.resend.cap - 1)
                qp.resend.n -= 1
                continue
            if qp.next_send > now + self.burst:
                return 0
            plane = self._pick_plane(now, seg.plane if self._usable_besides(seg.plane) else -1)
            if plane == NULL:
                return 0
            self._transmit(qp, seg, plane, now)
            qp.resend.head = (qp.resend.head + 1) & (qp.resend.cap - 1)
            qp.resend.n -= 1
            qp.retransmits += 1
        return 0

    cdef int _on_nack(self, QueuePair qp, int64_t echo, int64_t now) except -1:
        cdef int64_t psn = unwrap(echo, qp.cum_acked if qp.cum_acked > 0 else 0)
        cdef Seg* seg = win_get(&qp.inflight, psn)
        cdef Py_ssize_t i
        if seg == NULL or seg.acked:
            return 0
        for i in range(qp.resend.n):
            if qp.resend.a[(qp.resend.head + i) & (qp.resend.cap - 1)] == psn:
                return 0
        qp.trim_nacks += 1
        self.planes_c[seg.plane].trims += 1
        psnq_push(&qp.resend, psn)
        self._activate(qp)
        if self.cc_name != "none" and (qp.last_trim_cut < 0 or now - qp.last_trim_cut >= qp.cc.cnp_interval):
            qp.last_trim_cut = now
            qp.cc.tick(now)
            qp.cc.on_cnp(now)
            qp._rate_trace.append((c_to_s(now), qp.cc.rate))
        return 0

    cdef int _probe_planes(self, int64_t now) except -1:
        cdef int i
        cdef Plane* plane
        cdef QueuePair qp
        cdef int64_t psn
        cdef Packet* pkt
        cdef Py_ssize_t cs
        if self.ready == self.all_ready:
            return 0  # every plane is usable: none is probed (what the loop finds, without reading them)
        for i in range(self.nplanes):
            plane = &self.planes_c[i]
            if self.ready >> i & 1 or now < plane.probe_due:
                continue
            plane.probe_due = now + self._probe_interval()
            for qp in self.qp_list:
                if qp.remote_qpn < 0 or qp.cum_acked < 0:
                    continue
                psn = qp.cum_acked
                cs = charged_find(&qp.charged, psn)
                if cs >= 0:
                    charged_drop(&qp.charged, cs)
                pkt = self._data_packet(qp, plane, FABRIC_TX_PORT, psn & PSN_MASK, 0, 0, NULL, 0, True, False, 0)
                self._send(plane, TC_DATA, qp.rplanes[plane.index], FABRIC_TX_PORT, pkt)
                plane.probe_psn = psn
                plane.probe_at = now
                plane.probes += 1
                break
        return 0

    # -- receiving ---------------------------------------------------------------------------------------

    def on_frame(self, int plane_index, frame, now_):
        cdef int64_t now = ps_of(now_)
        self.c_on_frame(plane_index, packet_from(frame), now)

    cdef int c_on_frame(self, int plane_index, Packet* pkt, int64_t now) except -1:
        """Takes pkt."""
        cdef Plane* plane = &self.planes_c[plane_index]
        cdef uint8_t* f = pkt.data
        plane.rx_packets += 1
        if pkt.len < 62 or f[12] != 0x86 or f[13] != 0xDD:
            self.c_truncated += 1
            packet_free(pkt)
            return 0
        cdef int tclass = (f[14] & 0x0F) << 4 | f[15] >> 4
        try:
            self._packet(plane, pkt, f + 62, pkt.len - 62, f + 22, f[54] << 8 | f[55], tclass, now)
        finally:
            packet_free(pkt)
        return 0

    cdef int _packet(self, Plane* plane, Packet* pkt, const uint8_t* data, int n, const uint8_t* src, int sport,
                     int tclass, int64_t now) except -1:
        cdef int op
        cdef uint32_t qpn
        cdef int64_t psn
        cdef bint ack_req
        if tclass >> 2 == self.c_trim_dscp:
            return self._on_trimmed(plane, data, n)
        if n < 16:
            self.c_truncated += 1
            return 0
        if not (pkt.flags & PENDING) and not _icrc_ok(src, plane.addr_b, sport, data, n):
            self.c_bad_icrc += 1
            return 0
        op = data[0]
        qpn = _rd32(data + 4) & PSN_MASK
        psn = _rd32(data + 8) & PSN_MASK
        ack_req = data[8] >> 7
        cdef PyObject* found = self.by_qpn.get(0, qpn)
        if found == NULL:
            self.c_unknown_qp += 1
            return 0
        qp = <QueuePair>found
        if self.parks:  # what it carries may end a wait a parked queue pair has
            self._activate(<QueuePair>qp)
        if op == OP_WRITE_ONLY:
            return self._on_data(<QueuePair>qp, plane, data, n, psn, ack_req, tclass, now, False, 0, False)
        if op == OP_WRITE_ONLY_IMM:
            if n >= DATA_HEADER + IMM_BYTES:
                return self._on_data(<QueuePair>qp, plane, data, n, psn, ack_req, tclass, now, True,
                                     _rd32(data + 28), False)
            return self._on_data(<QueuePair>qp, plane, data, n, psn, ack_req, tclass, now, True, 0, True)
        if op == OP_ACK:
            return self._on_ack(<QueuePair>qp, plane, data, n, psn, now)
        if op == OP_CNP:
            (<QueuePair>qp).cc.tick(now)
            (<QueuePair>qp).cc.on_cnp(now)
            (<QueuePair>qp)._rate_trace.append((c_to_s(now), (<QueuePair>qp).cc.rate))
            return 0
        self.c_truncated += 1
        return 0

    cdef int _on_trimmed(self, Plane* plane, const uint8_t* data, int n) except -1:
        if n < BTH_BYTES:
            self.c_truncated += 1
            return 0
        cdef int op = data[0]
        cdef uint32_t qpn = _rd32(data + 4) & PSN_MASK
        cdef int64_t wpsn = _rd32(data + 8) & PSN_MASK
        cdef PyObject* found = self.by_qpn.get(0, qpn)
        qp = None if found == NULL else <QueuePair>found
        if qp is None or (op != OP_WRITE_ONLY and op != OP_WRITE_ONLY_IMM):
            if qp is None:
                self.c_unknown_qp += 1
            else:
                self.c_truncated += 1
            return 0
        cdef QueuePair q = <QueuePair>qp
        if self.parks:
            self._activate(q)
        cdef int64_t psn = unwrap(wpsn, q.expected)
        if psn < q.expected or beyond_has(&q.beyond, q.expected, psn):
            return 0
        self.c_trimmed += 1
        return self._send_ack(q, SYNDROME_NAK_PSN, plane.index, False, psn, True)

    cdef int _on_data(self, QueuePair qp, Plane* plane, const uint8_t* data, int n, int64_t wpsn, bint ack_req,
                      int tclass, int64_t now, bint has_imm, uint32_t imm, bint imm_cut) except -1:

        cdef int head = DATA_HEADER + (IMM_BYTES if has_imm else 0)
        if n < head + ICRC_BYTES or imm_cut:
            self.c_truncated += 1
            return 0
        cdef int64_t psn = unwrap(wpsn, qp.expected)
        cdef uint64_t va = (<uint64_t>_rd32(data + 12) << 32) | _rd32(data + 16)
        cdef uint32_t rkey = _rd32(data + 20)
        cdef int64_t length = _rd32(data + 24)
        cdef int64_t plen = n - ICRC_BYTES - head
        cdef MR* mr = NULL
        cdef int i
        for i in range(self.nmr):
            if self.mr_c[i].rkey == rkey:
                mr = &self.mr_c[i]
        if length != plen or (length and (mr == NULL or va < mr.va or va + length > mr.va + mr.size)):
            qp.bad += 1
            self.c_nak_sent += 1
            return self._send_ack(qp, SYNDROME_NAK_ACCESS, plane.index, False, -1, False)
        cdef bint duplicate = psn < qp.expected or beyond_has(&qp.beyond, qp.expected, psn)
        if not duplicate:
            if length:
                if self.payload:
                    memcpy(mr.buf + (va - mr.va), data + head, length)
                qp.rx_bytes += length
            if has_imm:
                qp.imm_wait[psn] = imm
            if psn == qp.expected:
                qp.expected += 1
                while beyond_has(&qp.beyond, qp.expected - 1, qp.expected):
                    beyond_discard(&qp.beyond, qp.expected)
                    qp.expected += 1
                if qp.imm_wait:
                    for p in sorted(k for k in qp.imm_wait if k < qp.expected):
                        self.recv_cq.append(Completion(qp.imm_wait.pop(p), "ok", 0, qp.qpn))
            else:
                beyond_add(&qp.beyond, qp.expected, psn)
        qp.ack_plane = plane.index
        qp.newest = psn
        if duplicate:
            self.c_duplicates += 1
            self._send_ack(qp, SYNDROME_ACK, -1, True, -1, False)
        elif ack_req or has_imm:
            self._send_ack(qp, SYNDROME_ACK, -1, False, -1, False)
        else:
            if not qp.ack_due:
                qp.ack_due = True
                qp.ack_deadline = now + self.ack_delay
                self._activate(qp)
            qp.ack_unsent += 1
            if qp.ack_unsent >= ACK_EVERY:
                self._send_ack(qp, SYNDROME_ACK, -1, False, -1, False)
        cdef Packet* pkt
        if tclass & 3 == 3:
            self.c_ce_marked += 1
            if qp.last_cnp < 0 or now - qp.last_cnp >= qp.cc.cnp_interval:
                qp.last_cnp = now
                qp.cnps_sent += 1
                pkt = packet_new(62 + BTH_BYTES + 16 + ICRC_BYTES)
                if pkt == NULL:
                    raise MemoryError()
                memset(pkt.data + 62, 0, BTH_BYTES + 16 + ICRC_BYTES)
                pkt.data[62] = OP_CNP
                pkt.data[64] = 0xFF
                pkt.data[65] = 0xFF
                _be32(pkt.data + 66, (1U << 30) | (qp.remote_qpn & PSN_MASK))
                self._send_ctl(qp, plane.index, pkt, True)
        return 0

    cdef int _send_ack(self, QueuePair qp, int syndrome, int plane, bint duplicate, int64_t echo, bint has_echo
                       ) except -1:
        qp.ack_due = False
        qp.ack_unsent = 0
        cdef Packet* pkt = packet_new(62 + BTH_BYTES + 4 + 36 + ICRC_BYTES)
        if pkt == NULL:
            raise MemoryError()
        cdef uint8_t* b = pkt.data + 62
        cdef int64_t base = qp.expected
        cdef int i
        memset(b, 0, BTH_BYTES + 4 + 36 + ICRC_BYTES)
        b[0] = OP_ACK
        b[2] = 0xFF
        b[3] = 0xFF
        _be32(b + 4, qp.remote_qpn & PSN_MASK)
        _be32(b + 8, <uint32_t>((qp.expected - 1) & PSN_MASK))
        _be32(b + 12, (<uint32_t>syndrome << 24) | <uint32_t>((echo if has_echo else qp.newest) & PSN_MASK))
        _be32(b + 16, <uint32_t>(base & PSN_MASK) | ((1U << 31) if duplicate else 0))
        if qp.beyond.count:
            for i in range(1, SACK_BITS):
                if beyond_has(&qp.beyond, qp.expected, base + i):
                    b[20 + (i >> 3)] |= 0x80 >> (i & 7)
        return self._send_ctl(qp, qp.ack_plane if plane < 0 else plane, pkt, False)

    cdef int _send_ctl(self, QueuePair qp, int plane_index, Packet* pkt, bint cnp) except -1:
        if plane_index >= len(qp.remote_addrs):
            packet_free(pkt)
            return 0
        cdef Plane* plane = &self.planes_c[plane_index]
        return self._send(plane, TC_CNP if cnp else TC_ACK, qp.rplanes[plane_index],
                          FABRIC_CNP_PORT if cnp else FABRIC_CTL_PORT, pkt)

    cdef int _on_ack(self, QueuePair qp, Plane* plane, const uint8_t* data, int n, int64_t wpsn, int64_t now
                     ) except -1:

        cdef uint32_t aeth = _rd32(data + 12)
        cdef int syndrome = aeth >> 24
        cdef int64_t echo = aeth & PSN_MASK
        cdef uint32_t basef = 0
        cdef const uint8_t* bitmap = NULL
        if n >= 16 + 36:
            basef = _rd32(data + 16)
            bitmap = data + 20
        cdef int64_t base = basef & PSN_MASK
        cdef bint duplicate = (basef >> 31) & 1
        if syndrome == SYNDROME_NAK_PSN:
            return self._on_nack(qp, echo, now)
        if syndrome != SYNDROME_ACK:
            qp.fail(f"remote access error (NAK 0x{syndrome:02x})")
            return 0
        cdef int64_t cum = unwrap(wpsn, qp.cum_acked if qp.cum_acked > 0 else 0)
        base = unwrap(base, cum + 1)
        cdef int64_t echoed = unwrap(echo, cum)
        if duplicate:
            if echoed == plane.probe_psn and plane.probe_at >= 0:
                plane.srtt = 0
                _rtt_sample(plane, now - plane.probe_at)
                plane.probe_at = -1
                plane.healthy, plane.losses = True, 0
                self._mark(plane)
            else:
                self._innocent(qp, echoed, now)
        cdef Seg* newest = win_get(&qp.inflight, echoed)
        if newest != NULL and newest.sends == 1 and not newest.acked:
            qp.srtt = smoothed(qp.srtt, now - newest.sent_at)
        cdef Py_ssize_t ndone = 0
        while ndone < qp.inflight.n and win_at(&qp.inflight, ndone).psn <= cum:
            ndone += 1
        cdef int64_t fresh = qp.cum_acked + SACK_BITS
        cdef int i
        cdef Seg* seg
        if bitmap != NULL:
            for i in range(SACK_BITS):
                if not (bitmap[i >> 3] >> (7 - (i & 7))) & 1:
                    continue
                seg = win_get(&qp.inflight, base + i)
                if seg != NULL and not seg.acked:
                    self._acked(seg, now, seg.psn <= fresh)
                    qp.sacked += 1
                    if seg.psn > qp.highest_sacked:
                        qp.highest_sacked = seg.psn
        qp.sacked_since = True
        while ndone:
            seg = win_at(&qp.inflight, 0)
            if seg.acked:
                qp.sacked -= 1
            else:
                self._acked(seg, now, seg.psn <= fresh)
            win_pop_front(&qp.inflight)
            ndone -= 1
        if cum > qp.cum_acked:
            qp.cum_acked = cum
            qp.cum_at = now
        self._reweigh()
        cdef Wr* w
        while qp.wrs.n:
            w = &qp.wrs.a[qp.wrs.head]
            if not (0 <= w.last.psn <= qp.cum_acked):
                break
            if w.signaled:
                self.cq.append(Completion(w.wr_id, "ok", w.nbytes))
            seg_unref(w.last)
            qp.wrs.head = (qp.wrs.head + 1) & (qp.wrs.cap - 1)
            qp.wrs.n -= 1
        return 0

    cdef void _acked(self, Seg* seg, int64_t now, bint sample) noexcept:
        seg.acked = True
        cdef Plane* carrier
        if seg.sends == 1:
            carrier = &self.planes_c[seg.plane]
            if sample:
                _rtt_sample(carrier, now - seg.sent_at)
            carrier.healthy, carrier.losses = True, 0
            self._mark(carrier)
            carrier.loss_rate -= carrier.loss_rate * LOSS_GAIN

    cdef void _reweigh(self) noexcept:
        cdef int live[MAXP]
        cdef int64_t queued[MAXP]
        cdef int nlive = 0, i, j
        cdef int64_t budget, fastest, typical, q, x
        cdef double w
        cdef Plane* p
        if not self.weighted:
            return
        for i in range(self.nplanes):
            p = &self.planes_c[i]
            if p.srtt and p.healthy:
                live[nlive] = i
                nlive += 1
        if not nlive:
            return
        budget = self.reorder_budget
        fastest = self.planes_c[live[0]].srtt
        for i in range(1, nlive):
            fastest = imin(fastest, self.planes_c[live[i]].srtt)
        for i in range(nlive):
            x = self.planes_c[live[i]].srtt - self.planes_c[live[i]].base_rtt
            j = i
            while j > 0 and queued[j - 1] > x:
                queued[j] = queued[j - 1]
                j -= 1
            queued[j] = x
        typical = queued[(nlive - 1) // 2] + budget // 8
        for i in range(nlive):
            p = &self.planes_c[live[i]]
            if p.srtt - fastest > budget:
                if p.weight:
                    p.weight = 0.0
                    self._mark(p)
                    p.excluded += 1
                    p.probe_due = 0
                continue
            q = p.srtt - p.base_rtt
            w = W_MIN if p.loss_rate >= 0.5 else pmax(W_MIN, 1.0 if q <= typical else <double>typical / <double>q)
            p.weight = w if w <= p.weight else pmin(w, pmax(W_MIN, p.weight + W_STEP))
            self._mark(p)

    cdef void _innocent(self, QueuePair qp, int64_t psn, int64_t now) noexcept:
        cdef Py_ssize_t s = charged_find(&qp.charged, psn)
        if s < 0:
            return
        cdef int index = qp.charged.plane[s]
        cdef int64_t first_sent = qp.charged.first[s]
        charged_drop(&qp.charged, s)
        qp.reo_wnd = imin(qp.reo_wnd + qp.srtt // 4, 2 * qp.srtt)
        cdef Plane* plane = &self.planes_c[index]
        if first_sent >= 0:
            _rtt_sample(plane, now - first_sent)
        plane.spurious += 1
        plane.losses = plane.losses - 1 if plane.losses - 1 > 0 else 0
        plane.loss_rate = pmax(0.0, plane.loss_rate - LOSS_GAIN)
        if not plane.healthy:
            plane.healthy, plane.losses = True, 0
            self._mark(plane)


cdef inline void _rtt_sample(Plane* plane, int64_t sample) noexcept:
    plane.srtt = smoothed(plane.srtt, sample)
    plane.base_rtt = imin(plane.base_rtt, sample)


cdef inline void _be32(uint8_t* b, uint32_t v) noexcept nogil:
    b[0] = v >> 24
    b[1] = (v >> 16) & 0xFF
    b[2] = (v >> 8) & 0xFF
    b[3] = v & 0xFF


cdef inline uint32_t _rd32(const uint8_t* b) noexcept nogil:
    return (<uint32_t>b[0] << 24) | (<uint32_t>b[1] << 16) | (<uint32_t>b[2] << 8) | b[3]


cdef bint _icrc_ok(const uint8_t* src, const uint8_t* dst, int sport, const uint8_t* body, int n) noexcept:
    """wire.check: the ICRC (little-endian, the last 4 bytes) of a packet whose checksums were not owed."""
    cdef uint8_t head[8 + 8 + 32 + 8]
    cdef int udp_len = 8 + n
    memset(head, 0xFF, 8)
    head[8], head[9], head[10], head[11] = 0x6F, 0xFF, 0xFF, 0xFF
    head[12], head[13], head[14], head[15] = udp_len >> 8, udp_len & 0xFF, 17, 0xFF
    memcpy(head + 16, src, 16)
    memcpy(head + 32, dst, 16)
    head[48], head[49], head[50], head[51] = sport >> 8, sport & 0xFF, ROCE_PORT >> 8, ROCE_PORT & 0xFF
    head[52], head[53], head[54], head[55] = udp_len >> 8, udp_len & 0xFF, 0xFF, 0xFF
    cdef uint32_t crc = crc32(head, 56, 0)
    cdef uint8_t bth[12]
    memcpy(bth, body, 12)
    bth[4] = 0xFF
    crc = crc32(bth, 12, crc)
    crc = crc32(body + 12, n - 16, crc)
    cdef uint32_t got = body[n - 4] | (<uint32_t>body[n - 3] << 8) | (<uint32_t>body[n - 2] << 16) | \
        (<uint32_t>body[n - 1] << 24)
    return got == crc


# -- a ring's data movement (emu.collectives.rank.Ring.ring, compiled) -------------------------------------

cdef extern from "sys/mman.h" nogil:
    int madvise(void* addr, size_t length, int advice)
    int MADV_DONTNEED

cdef extern from "unistd.h" nogil:
    long sysconf(int name)
    int _SC_PAGESIZE

cdef enum:
    RING_YIELD = 0      # it posted a write: the device sends it before the ring goes on (`yield None`)
    RING_RECV = 1       # it waits for a receive completion (`yield dev.has_recv`)
    RING_IDLE = 2       # it waits for its writes to be acknowledged (`yield dev.idle`)
    RING_DONE = 3


cdef class RingOp:
    """Ring.ring (emu.collectives.rank), compiled: the same writes posted, the same completions waited for,
    the same yields, in the same order, so an endpoint running it does what the reference's generator
    makes it do; the reduction is a C loop and a used staging slice goes back to the kernel. The ring's
    Python generator yields it once (Device.ring_op) and the compiled endpoint runs it to its end."""

    cdef Device dev
    cdef QueuePair qp
    cdef object ring
    cdef uint8_t* data
    cdef uint8_t* stage
    cdef int64_t* rfirst        # the steps as runs (emu.collectives.ringsteps): a few numbers, not a step each
    cdef int64_t* rcount
    cdef bint* rstage
    cdef bint* rreduce
    cdef int nruns
    cdef int64_t nsteps
    cdef uint64_t va_stage, va_data
    cdef uint32_t rk_stage, rk_data
    cdef int64_t chunk, grain, k, base, n
    cdef int64_t s, j, want
    cdef int phase
    cdef int64_t* got
    cdef Py_ssize_t ngot, capgot
    cdef public int64_t msg
    cdef public int64_t done_at

    def __cinit__(self):
        self.rfirst = NULL
        self.rcount = NULL
        self.rstage = NULL
        self.rreduce = NULL
        self.got = NULL

    def __dealloc__(self):
        free(self.rfirst)
        free(self.rcount)
        free(self.rstage)
        free(self.rreduce)
        free(self.got)

    def __init__(self, Device dev, ring, list runs, int64_t chunk):
        self.dev = dev
        self.ring = ring
        self.qp = <QueuePair?>ring.right
        self.data = dev.buffer_of(ring.data)
        self.stage = dev.buffer_of(ring.stage)
        self.nruns = len(runs)
        self.rfirst = <int64_t*>malloc(max(1, self.nruns) * sizeof(int64_t))
        self.rcount = <int64_t*>malloc(max(1, self.nruns) * sizeof(int64_t))
        self.rstage = <bint*>malloc(max(1, self.nruns) * sizeof(bint))
        self.rreduce = <bint*>malloc(max(1, self.nruns) * sizeof(bint))
        if not (self.rfirst and self.rcount and self.rstage and self.rreduce):
            raise MemoryError()
        cdef int i
        self.nsteps = 0
        for i, (first, count, dst, red) in enumerate(runs):
            if dst not in ("stage", "data"):
                raise ValueError(f"a ring step writes to stage or data, not {dst!r}")
            self.rfirst[i], self.rcount[i], self.rstage[i], self.rreduce[i] = first, count, dst == "stage", red
            self.nsteps += count
        peer = ring.peer
        self.va_stage, self.rk_stage = peer["stage"]["va"], peer["stage"]["rkey"]
        self.va_data, self.rk_data = peer["data"]["va"], peer["data"]["rkey"]
        self.chunk = chunk
        self.grain = max(4, min(ring.slice, chunk) // 4 * 4)
        self.k = (chunk + self.grain - 1) // self.grain if chunk > 0 else 0
        self.base = ring.msg
        self.n = ring.n
        self.s = 0
        self.j = 0
        self.phase = 0
        self.capgot = max(16, len(ring.got))
        self.got = <int64_t*>malloc(self.capgot * sizeof(int64_t))
        self.ngot = 0
        for w in ring.got:
            self.got[self.ngot] = w
            self.ngot += 1
        self.msg = self.base
        self.done_at = 0

    cdef int _drain(self) except -1:
        """got.update(c.wr_id for c in dev.poll_recv())"""
        cdef Py_ssize_t i
        cdef int64_t w
        cdef bint have
        q = self.dev.recv_cq
        for c in q:
            w = c.wr_id
            have = False
            for i in range(self.ngot):
                if self.got[i] == w:
                    have = True
                    break
            if not have:
                if self.ngot == self.capgot:
                    self.capgot *= 2
                    self.got = <int64_t*>realloc(self.got, self.capgot * sizeof(int64_t))
                self.got[self.ngot] = w
                self.ngot += 1
        q.clear()
        return 0

    cdef bint _take(self, int64_t want) noexcept:
        """`want in got`, and discarded from it if so."""
        cdef Py_ssize_t i
        for i in range(self.ngot):
            if self.got[i] == want:
                self.ngot -= 1
                self.got[i] = self.got[self.ngot]
                return True
        return False

    cdef void _reduce(self, int64_t off, int64_t nbytes) noexcept:
        """data[off:off + nbytes] += stage[...] as int32 (wrapping, as numpy's), then the staging slice's
        whole pages go back (emu.roce.transport.release)."""
        cdef uint32_t* d = <uint32_t*>(self.data + off)
        cdef const uint32_t* st = <const uint32_t*>(self.stage + off)
        cdef int64_t i, m = nbytes // 4
        for i in range(m):
            d[i] = d[i] + st[i]
        cdef int64_t page = sysconf(_SC_PAGESIZE)
        cdef int64_t lo = (off + page - 1) // page * page
        cdef int64_t hi = (off + nbytes) // page * page
        if hi > lo:
            madvise(self.stage + lo, hi - lo, MADV_DONTNEED)

    cdef int _finish(self) except -1:
        self.dev.cq.clear()  # dev.poll_cq(): our own writes' completions (unsignaled: failures only), not looked at
        self.done_at = self.dev.sched.cclock()
        self.ring.got.clear()
        for i in range(self.ngot):
            self.ring.got.add(self.got[i])
        return 0

    cdef int step(self) except -1:
        """Resume until the reference's generator would yield: what it yields (RING_*)."""
        cdef int64_t lo, hi, c, off
        cdef bint stage, reduce
        while True:
            if self.phase == 0:  # the top of slice j of step s
                if self.s > self.nsteps:
                    self.msg = self.base + self.nsteps * self.k
                    if self.dev.c_busy():
                        self.phase = 2
                        return RING_IDLE
                    self._finish()
                    self.phase = 3
                    return RING_DONE
                if self.j == self.k:
                    self.j = 0
                    self.s += 1
                    continue
                if self.s > 0:
                    self.want = self.base + (self.s - 1) * self.k + self.j
                    self.phase = 1
                else:
                    self.phase = 4
                    continue
            if self.phase == 1:  # wait_imm(want)
                self._drain()
                if not self._take(self.want):
                    return RING_RECV
                c = self._step(self.s - 1, &stage, &reduce)
                if reduce and self.dev.payload:
                    c = ((c - 1) % self.n + self.n) % self.n
                    lo = self.j * self.grain
                    hi = min(self.chunk, lo + self.grain)
                    self._reduce(c * self.chunk + lo, hi - lo)
                self.phase = 4
            if self.phase == 4:  # post slice j of step s, if there is a step s
                self.phase = 0
                if self.s < self.nsteps:
                    lo = self.j * self.grain
                    hi = min(self.chunk, lo + self.grain)
                    off = self._step(self.s, &stage, &reduce) * self.chunk + lo
                    self._post(self.base + self.s * self.k + self.j, off, hi - lo, stage)
                    self.j += 1
                    return RING_YIELD
                self.j += 1
                continue
            if self.phase == 2:  # resumed: its writes are acknowledged
                self._finish()
                self.phase = 3
                return RING_DONE
            return RING_DONE

    cdef int64_t _step(self, int64_t s, bint* stage, bint* reduce) noexcept:
        """Step s's chunk (RingSteps.__getitem__), and where it goes and whether it reduces."""
        cdef int i
        for i in range(self.nruns):
            if s < self.rcount[i]:
                stage[0] = self.rstage[i]
                reduce[0] = self.rreduce[i]
                return ((self.rfirst[i] - s) % self.n + self.n) % self.n
            s -= self.rcount[i]
        return -1

    cdef int _post(self, int64_t wr, int64_t off, int64_t nbytes, bint stage) except -1:
        """self.right.post_write(wr, self.data, off, nbytes, region["va"] + off, region["rkey"], imm=wr)"""
        cdef QueuePair qp = self.qp
        if qp.remote_qpn < 0:
            raise RoceError("the queue pair is not connected")
        if qp.error:
            self.dev.cq.append(Completion(wr, f"flushed: {qp.error}", 0, qp.qpn))
            return 0
        return qp.c_post_write(wr, self.data, off, nbytes, (self.va_stage if stage else self.va_data) + off,
                               self.rk_stage if stage else self.rk_data, True, <uint32_t>(wr & 0xFFFFFFFF), False)


# -- the endpoint (emu.roce.endpoint.Endpoint) ----------------------------------------------------------------

cdef enum:
    STUCK_WAKES = 100_000
    WAIT_NONE = 0
    WAIT_PY = 1
    WAIT_RECV = 2
    WAIT_DEV_IDLE = 3
    WAIT_QP_IDLE = 4
    WAIT_RING = 5


cdef int _ev_wake(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    cdef Endpoint ep = <Endpoint>obj
    if t == ep.wake_at:
        ep.wake_at = NEVER
        ep.kick(t)
    return 0


cdef class Arrival(Sink):
    """Frames for the host's MetaRoCE port on plane `plane`, straight to its compiled endpoint (bound once
    the endpoint exists: its ports are attached first)."""

    cdef Endpoint ep
    cdef int plane

    def __init__(self, int plane):
        self.ep = None
        self.plane = plane

    def bind(self, Endpoint ep):
        self.ep = ep

    cdef int take(self, int64_t t, Packet* p) except -1:
        if self.ep is None:
            packet_free(p)
            return 0
        return self.ep.c_arrive(self.plane, t, p)

    def __call__(self, t_, frame):
        cdef int64_t t = ps_of(t_)
        self.take(t, packet_from(frame))


cdef class Endpoint:
    """emu.roce.endpoint.Endpoint, compiled: the device inside the engine, woken by arrivals and its own
    timers, resuming its operation (a Python generator) only once what it waits for holds."""

    cdef Schedule sched
    cdef public object loop
    cdef readonly Device dev
    cdef public object fail
    cdef public str name
    cdef public object op
    cdef public object done
    cdef object wait
    cdef int wait_kind
    cdef QueuePair wait_qp
    cdef RingOp ring
    cdef int ring_pending
    cdef public int64_t wake_at
    cdef int64_t same
    cdef public bint stopped

    def __init__(self, loop, Device dev, fail, str name):
        self.loop = loop
        self.sched = <Schedule?>loop.sched
        self.dev = dev
        self.fail = fail
        self.name = name
        self.op = None
        self.done = None
        self._set_wait(None)
        self.wake_at = NEVER
        self.same = 0
        self.stopped = False

    cdef void _set_wait(self, object wait):
        """What the operation waits for, classified once: the waits the operations use are evaluated here."""
        self.wait = wait
        self.wait_qp = None
        if wait is None:
            self.wait_kind = WAIT_NONE
            return
        owner = getattr(wait, "__self__", None)
        name = getattr(wait, "__name__", "")
        if owner is self.dev and name == "has_recv":
            self.wait_kind = WAIT_RECV
        elif owner is self.dev and name == "idle":
            self.wait_kind = WAIT_DEV_IDLE
        elif type(owner) is QueuePair and name == "idle":
            self.wait_kind = WAIT_QP_IDLE
            self.wait_qp = <QueuePair>owner
        elif type(wait) is RingOp:
            self.wait_kind = WAIT_RING
            self.ring = <RingOp>wait
        else:
            self.wait_kind = WAIT_PY

    cdef bint _holds(self) except -1:
        if self.wait_kind == WAIT_NONE:
            return True
        if self.wait_kind == WAIT_RECV:
            return len(self.dev.recv_cq) > 0
        if self.wait_kind == WAIT_DEV_IDLE:
            return not self.dev.c_busy()
        if self.wait_kind == WAIT_QP_IDLE:
            return not self.wait_qp.c_busy()
        return bool(self.wait())

    @classmethod
    def attached(cls, host, list planes, fail, str name, **device):
        """emu.roce.endpoint.Endpoint.attached, compiled: a device on the host's ports `planes`."""

        sends, host_macs, switch_macs = [], [], []
        arrivals = []
        for i, (switch, port, _addr, _rate) in enumerate(planes):
            arrival = Arrival(i)
            send, host_mac, switch_mac = host.attach(switch, port, arrival)
            arrivals.append(arrival)
            sends.append(send)
            host_macs.append(host_mac)
            switch_macs.append(switch_mac)
        dev = Device([p[2] for p in planes], plane_rate_bps=min(p[3] for p in planes),
                     clock=host.loop, io=FabricIO(sends, host_macs, switch_macs), **device)
        ep = cls(host.loop, dev, fail, name)
        for arrival in arrivals:
            arrival.bind(ep)
        return ep

    cdef int c_arrive(self, int plane, int64_t t, Packet* p) except -1:
        if self.stopped:
            packet_free(p)
            return 0
        self.dev.c_on_frame(plane, p, t)
        return self.kick(t)

    def arrive(self, int plane, t_, frame):
        cdef int64_t t = ps_of(t_)
        self.c_arrive(plane, t, packet_from(frame))

    def start(self, op, t_, done):
        cdef int64_t t = ps_of(t_)
        self.op = op
        self._set_wait(None)
        self.done = done
        self.kick(t)

    def stop(self):
        self.op = None
        self.stopped = True

    def busy(self):
        return self.op is not None

    def describe(self):
        return self.dev.describe()

    cdef int kick(self, int64_t t) except -1:
        cdef int64_t due
        if self.stopped:
            return 0
        try:
            while True:
                due = self.dev.c_step(t)
                if not self._advance(t):
                    break
        except Exception as exc:
            self.op = None
            self.fail(f"{self.name}: {type(exc).__name__}: {exc}")
            return 0
        if due <= t:
            self.same += 1
            if self.same > STUCK_WAKES:
                self.op = None
                self.fail(f"{self.name}: its device makes no progress at {c_to_s(t):.9f} s: {self.dev.describe()}")
                return 0
            due = t
        else:
            self.same = 0
        if due != NEVER and (due < self.wake_at or self.wake_at < t):
            self.wake_at = due
            self.sched.push_held(due, _ev_wake, self)
        return 0

    cdef bint _advance(self, int64_t t) except -1:
        cdef bint moved = False
        cdef int code
        while self.op is not None:
            if self.wait_kind == WAIT_RING:  # a compiled ring inside the operation: its own yields
                if not self._ring_holds():
                    return moved
                moved = True
                code = self.ring.step()
                if code == RING_YIELD:
                    self.ring_pending = RING_YIELD
                    return True
                if code != RING_DONE:
                    self.ring_pending = code
                    continue
                self.ring = None  # done: the generator goes on from where it yielded the ring
            elif not self._holds():
                return moved
            moved = True
            try:
                self._set_wait(self.op.send(None))
            except StopIteration as stop:
                self.op = None
                self._set_wait(None)
                if self.done is not None:
                    self.done(stop.value, t)
                return True
            if self.wait_kind == WAIT_RING:  # the reference runs the ring on at once, to its first yield
                code = self.ring.step()
                if code == RING_YIELD:
                    self.ring_pending = RING_YIELD
                    return True
                if code == RING_DONE:
                    self.ring = None
                    self.wait_kind = WAIT_NONE  # and the generator on, as the ring returned within it
                    continue
                self.ring_pending = code
                continue
            if self.wait_kind == WAIT_NONE:
                return True
        return moved

    cdef bint _ring_holds(self) except -1:
        """What the reference's loop asks of the ring's pending wait before resuming it."""
        if self.ring_pending == RING_YIELD:
            return True
        if self.ring_pending == RING_RECV:
            return len(self.dev.recv_cq) > 0
        return not self.dev.c_busy()


def _ms(int64_t ps):
    return f"{c_to_s(ps) * 1e3:.3f}"
