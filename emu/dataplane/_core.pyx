# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The compiled core: the schedule, the links and NIC models and the switch pipeline's hot path.

Each class here is the compiled twin of a Python reference class (emu.dataplane.schedule.Schedule,
pipe.Transmitter, buffer.SharedBuffer, pipeline.Switch's forwarding) and does what it does in the
same order: the same events, scheduled in the same sequence, the same floating-point sums, the same
random numbers (Python's Mersenne Twister, its state handed over), so a run gives the same figures on
either core bit for bit (tests/test_cores.py). What differs is the cost: events are C structs in a
binary heap, frames are C buffers from a pool, and nothing is allocated or looked up by name per hop.
Python callbacks still run where the reference has them (a job's timers, the kernel's ports).
"""

from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from libc.math cimport INFINITY, rint
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

import time

cdef extern from "stdlib.h" nogil:
    void* aligned_alloc(size_t alignment, size_t size)

cdef extern from "time.h" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec* ts)
    int CLOCK_MONOTONIC

cdef inline double monotonic() noexcept nogil:
    """time.monotonic(): the same clock (CLOCK_MONOTONIC), the same conversion."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + ts.tv_nsec * 1e-9

# -- fabric time in whole picoseconds: the compiled twin of emu.simtime (its docstring says why and how) --------

cdef double INT64_LIMIT = 9223372036854775808.0  # 2**63 as a double
cdef int64_t NEVER = 9223372036854775807  # emu.simtime.NEVER: later than any instant
cdef uint64_t PS_PER_S = 1000000000000
cdef int64_t BITS_LIMIT = 9223372  # (2**63 - 1) // PS_PER_S: bits whose picosecond product fits an int64


cdef int64_t c_to_ps(double seconds) except? -1:
    """emu.simtime.to_ps: seconds x 10^12 in double, nearest, halves to even (rint, the default mode)."""
    cdef double x = seconds * 1e12
    if not (-INT64_LIMIT <= x < INT64_LIMIT):
        raise OverflowError(f"{seconds!r} s is not a time in int64 picoseconds")
    return <int64_t>rint(x)


cdef double c_to_s(int64_t ps) noexcept nogil:
    """emu.simtime.to_s: ps / 10^12 in double (a division, as the reference)."""
    return <double>ps / 1e12


cdef extern from *:
    ctypedef unsigned long long u128 "unsigned __int128"  # gcc's and clang's
    void __builtin_prefetch(const void* p) nogil


cdef int64_t c_ser_ps(int64_t nbytes, int64_t rate_bps) except -1:
    """emu.simtime.ser_ps: nbytes x 8 x 10^12 / rate_bps, nearest, halves up, in unsigned 64-bit integers
    where the product fits (BITS_LIMIT: every frame), else in 128 (a long PFC pause); the result in int64."""
    if nbytes < 0 or rate_bps <= 0:
        raise OverflowError(f"{nbytes} bytes at {rate_bps} bit/s is outside int64 picosecond arithmetic")
    if nbytes <= BITS_LIMIT // 8:
        return <int64_t>((<uint64_t>(nbytes * 8) * PS_PER_S + <uint64_t>(rate_bps // 2)) // <uint64_t>rate_bps)
    cdef u128 ps = (<u128>nbytes * 8 * PS_PER_S + <u128>(rate_bps // 2)) // <u128>rate_bps
    if ps > <u128>NEVER:
        raise OverflowError(f"{nbytes} bytes at {rate_bps} bit/s is outside int64 picosecond arithmetic")
    return <int64_t>ps


cdef int64_t c_pause_ps(int64_t quanta, int64_t rate_bps) except -1:
    """emu.dataplane.pipe.pause_ps: `quanta` PFC quanta (64 bytes' time each) at `rate_bps` (0: no time)."""
    return c_ser_ps(quanta * 64, rate_bps) if rate_bps else 0


cdef int64_t c_rate_of(double rate_bps) except -1:
    """emu.simtime.rate_of: a rate in whole bit/s, nearest, halves to even; positive."""
    if not (rate_bps >= 0.5 and rate_bps < INT64_LIMIT):
        raise ValueError(f"a rate must be a positive number of bit/s, got {rate_bps!r}")
    return <int64_t>rint(rate_bps)


cdef int64_t ps_of(object t) except? -1:
    """A time handed in from Python: whole picoseconds, as the reference's schedule asks; a float (seconds, or
    a rounded sum) is a TypeError at its caller on both cores, never truncated by a conversion to int64."""
    if type(t) is not int:
        raise TypeError(f"a schedule's time is whole picoseconds (int), got {t!r}")
    return <int64_t>t


def rate_of(double rate_bps):
    """The compiled c_rate_of, for tests/test_simtime.py."""
    return c_rate_of(rate_bps)


def to_ps(double seconds):
    """The compiled c_to_ps, for tests/test_simtime.py."""
    return c_to_ps(seconds)


def to_s(int64_t ps):
    """The compiled c_to_s, for tests/test_simtime.py."""
    return c_to_s(ps)


def ser_ps(int64_t nbytes, int64_t rate_bps):
    """The compiled c_ser_ps, for tests/test_simtime.py."""
    return c_ser_ps(nbytes, rate_bps)


cdef enum:
    VIRTUAL = 0
    ENGINE = 2

MODES = {"virtual": VIRTUAL, "engine": ENGINE}


# -- frames ------------------------------------------------------------------------------------------

cdef enum:
    SMALL = 2048

cdef Packet* _pool = NULL  # free frames of SMALL bytes


cdef Packet* packet_new(int size) noexcept:
    """A frame buffer of at least `size` bytes, from the pool where it fits."""
    global _pool
    cdef Packet* p
    if size <= SMALL and _pool != NULL:
        p = _pool
        _pool = p.next
    elif size <= SMALL:  # the frame right after its header, a line on: one stream of lines, not two places
        p = <Packet*>aligned_alloc(64, 64 + SMALL)
        if p == NULL:
            return NULL
        p.cap = SMALL
        p.data = <uint8_t*>p + 64
    else:
        p = <Packet*>malloc(sizeof(Packet))
        if p == NULL:
            return NULL
        p.cap = size
        p.data = <uint8_t*>malloc(p.cap)
        if p.data == NULL:
            free(p)
            return NULL
    p.len = size
    p.meta = 0
    p.flags = 0
    p.next = NULL
    return p


cdef void packet_free(Packet* p) noexcept:
    global _pool
    if p.cap == SMALL:
        p.next = _pool
        _pool = p
    else:
        free(p.data)
        free(p)


cdef Packet* packet_from(object frame) except NULL:
    """A pooled copy of a Python frame (bytes, bytearray, memoryview)."""
    cdef Py_buffer view
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    cdef Packet* p = packet_new(<int>view.len)
    if p == NULL:
        PyBuffer_Release(&view)
        raise MemoryError()
    memcpy(p.data, view.buf, view.len)
    PyBuffer_Release(&view)
    return p


cdef bytes packet_bytes(Packet* p):
    """The frame as Python sees it: whole, its checksums computed if they were owed."""
    if p.flags & PENDING:
        materialize(p)
    return PyBytes_FromStringAndSize(<char*>p.data, p.len)


cdef void materialize(Packet* p) noexcept:
    """A RoCEv2 frame built in the compiled core (Ethernet, IPv6, UDP to 4791, BTH onward, ICRC last) with
    its UDP checksum and ICRC owed: compute them, as emu.packet.udp6_frame and emu.roce.wire.seal do."""
    cdef uint8_t* f = p.data
    cdef int n = p.len
    p.flags &= ~PENDING
    if n < 62 + 16:
        return
    cdef int ulen = n - 54
    cdef uint8_t head[56]
    memset(head, 0xFF, 8)
    head[8], head[9], head[10], head[11] = 0x6F, 0xFF, 0xFF, 0xFF
    head[12], head[13], head[14], head[15] = ulen >> 8, ulen & 0xFF, 17, 0xFF
    memcpy(head + 16, f + 22, 32)  # source and destination addresses
    head[48], head[49], head[50], head[51] = f[54], f[55], f[56], f[57]
    head[52], head[53], head[54], head[55] = ulen >> 8, ulen & 0xFF, 0xFF, 0xFF
    cdef uint32_t crc = crc32(head, 56, 0)
    cdef uint8_t bth[12]
    memcpy(bth, f + 62, 12)
    bth[4] = 0xFF
    crc = crc32(bth, 12, crc)
    crc = crc32(f + 74, n - 74 - 4, crc)
    f[n - 4], f[n - 3], f[n - 2], f[n - 1] = crc & 0xFF, (crc >> 8) & 0xFF, (crc >> 16) & 0xFF, crc >> 24
    # the UDP checksum: the pseudo-header (addresses, length, next header) and the datagram, checksum zero
    f[60] = 0
    f[61] = 0
    cdef uint64_t total = 0
    cdef int i
    for i in range(22, 54, 2):
        total += f[i] << 8 | f[i + 1]
    total += ulen + 17
    for i in range(54, n - 1, 2):
        total += f[i] << 8 | f[i + 1]
    if (n - 54) & 1:
        total += f[n - 1] << 8
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    cdef uint32_t csum = ~total & 0xFFFF
    if csum == 0:
        csum = 0xFFFF
    f[60] = csum >> 8
    f[61] = csum & 0xFF


# -- the schedule ------------------------------------------------------------------------------------

cdef enum:
    HEAP0 = 1024

cdef uint64_t OUTSIDE = 0x5A17E0F7C3D2B1A9ULL  # emu.dataplane.schedule's constants, the same bits
cdef uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL


cdef inline uint64_t c_mix64(uint64_t x) noexcept nogil:
    """emu.dataplane.schedule.mix64: splitmix64's finaliser."""
    x ^= x >> 30
    x *= 0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline uint64_t c_identity(uint64_t h, uint32_t c) noexcept nogil:
    """emu.dataplane.schedule.identity."""
    return c_mix64(h + (<uint64_t>c + 1) * GOLDEN)


cdef inline bint before(Event* pool, HeapKey* a, HeapKey* b) noexcept nogil:
    """Key a runs before key b: (time, scheduler's identity, child) in order; the pool's entries are read
    only for keys whose time and identity's high half tie."""
    if a.t != b.t:
        return a.t < b.t
    if a.hh != b.hh:
        return a.hh < b.hh
    cdef Event* x = &pool[a.slot]
    cdef Event* y = &pool[b.slot]
    if x.h != y.h:
        return x.h < y.h
    return x.c < y.c


cdef HeapKey* heap_alloc(Py_ssize_t cap, void** mem) noexcept:
    """Room for cap keys placed so that heap[1] starts a cache line: the children of node i, 2i + 1 and
    2i + 2, then lie in one line (16-byte keys), the line a sift reads to compare them."""
    mem[0] = aligned_alloc(64, (cap + 4) * sizeof(HeapKey))
    if mem[0] == NULL:
        return NULL
    return <HeapKey*>(<char*>mem[0] + 64 - sizeof(HeapKey))


cdef class Schedule:
    """emu.dataplane.schedule.Schedule, compiled: events ordered by (time, tie key), the keys computed as the
    reference computes them. The heap holds each event's time, its identity's high half and its slot (what a
    sift moves: 16 bytes, a node's two children in one cache line, not the event); the events stay in a
    pool, where a comparison reads the rest of a key only when time and high half tie. An event
    is a C function on a core object (a link's end of transmission, a frame's arrival) or a Python
    callback fn(t, arg), run where the reference runs it."""

    def __cinit__(self, mode: str = "virtual", idle_dilation: float = 1.0):
        self.cap = HEAP0
        self.heap = heap_alloc(self.cap, &self.heap_mem)
        self.pool = <Event*>aligned_alloc(64, self.cap * sizeof(Event))  # an event in one cache line
        self.spare = <int32_t*>malloc(self.cap * sizeof(int32_t))
        if not (self.heap and self.pool and self.spare):
            raise MemoryError()
        self.n = 0
        self.used = 0
        self.nspare = 0
        self.cur_h = OUTSIDE
        self.cur_n = 0
        self.run_h = OUTSIDE
        self.run_c = 0
        self.top_t = -1
        self.top_h = 0
        self.top_c = 0
        self.now = 0
        self.mode = MODES[mode]
        self.busy = 0
        self.windowed = False
        self.drain_until = 0
        self.idle_dilation = idle_dilation
        self.anchor_f = 0
        self.anchor_w = monotonic()
        self.paced = False

    def __dealloc__(self):
        cdef Py_ssize_t i
        cdef Event* e
        for i in range(self.n):
            e = &self.pool[self.heap[i].slot]
            if e.fn == NULL:
                _release(e)
            elif e.held:
                Py_XDECREF(e.obj)
        free(self.heap_mem)
        free(self.pool)
        free(self.spare)

    cdef int push(self, int64_t t, EventFn fn, object obj, object parg, void* varg, int64_t iarg) except -1:
        cdef uint32_t c = self.cur_n
        self.cur_n += 1
        return self.push_key(t, self.cur_h, c, fn, obj, parg, varg, iarg)

    cdef int push_held(self, int64_t t, EventFn fn, object obj) except -1:
        """A compiled event on an object that may otherwise go (an endpoint whose job ended): held till it runs."""
        cdef uint32_t c = self.cur_n
        self.cur_n += 1
        return self.push_key(t, self.cur_h, c, fn, obj, None, NULL, 0, 1)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = 2 * self.cap
        cdef void* mem
        cdef HeapKey* heap = heap_alloc(cap, &mem)
        if heap == NULL:
            raise MemoryError()
        memcpy(heap, self.heap, self.n * sizeof(HeapKey))
        free(self.heap_mem)
        self.heap = heap
        self.heap_mem = mem
        cdef Event* pool = <Event*>aligned_alloc(64, cap * sizeof(Event))
        if pool == NULL:
            raise MemoryError()
        memcpy(pool, self.pool, self.cap * sizeof(Event))
        free(self.pool)
        self.pool = pool
        cdef int32_t* spare = <int32_t*>realloc(self.spare, cap * sizeof(int32_t))
        if spare == NULL:
            raise MemoryError()
        self.spare = spare
        self.cap = cap
        return 0

    cdef int push_key(self, int64_t t, uint64_t h, uint32_t c, EventFn fn, object obj, object parg, void* varg,
                      int64_t iarg, int held=0) except -1:
        """An event whose key was taken earlier: a frame that overtakes the link's FIFO (Transmitter._fly), or
        one a peer worker scheduled. A link's first frame in flight goes in by push_land."""
        cdef Event* e = self._place(t, h, c)
        e.fn = fn
        e.held = held
        e.obj = <PyObject*>obj
        e.parg = <PyObject*>parg
        if fn == NULL:  # a Python callback holds its objects; a compiled one's live as long as the fabric
            Py_INCREF(obj)
            Py_INCREF(parg)
        elif held:
            Py_INCREF(obj)
        e.varg = varg
        e.iarg = iarg
        return 0

    cdef int push_land(self, Transmitter tx, Flight* f) except -1:
        """The landing of flight f, tx's first in flight: the event carries where it lands (borrowed, as the
        flight holds it), so the landing enters the switch without reading the link's FIFO first."""
        cdef Event* e = self._place(f.t, f.h, f.c)
        e.fn = _ev_land
        e.held = 0
        e.obj = <PyObject*>tx
        e.parg = f.target
        e.varg = f.p
        e.iarg = f.port
        return 0

    cdef Event* _place(self, int64_t t, uint64_t h, uint32_t c) except NULL:
        """A pool slot for an event of key (t, h, c), its key in the heap; the caller fills the rest."""
        if self.n == self.cap or (self.nspare == 0 and self.used == self.cap):
            self._grow()
        cdef int32_t slot
        if self.nspare:
            self.nspare -= 1
            slot = self.spare[self.nspare]
        else:
            slot = <int32_t>self.used
            self.used += 1
        cdef Event* e = &self.pool[slot]
        e.t = t
        e.h = h
        e.c = c
        cdef HeapKey k
        k.t = t
        k.hh = <uint32_t>(h >> 32)
        k.slot = slot
        cdef HeapKey* heap = self.heap
        cdef Event* pool = self.pool
        cdef Py_ssize_t i = self.n, up
        self.n += 1
        while i > 0:
            up = (i - 1) >> 1
            if before(pool, &k, &heap[up]):
                heap[i] = heap[up]
                i = up
            else:
                break
        heap[i] = k
        return e

    cdef inline void _pop(self, Event* out) noexcept:
        cdef HeapKey* heap = self.heap
        cdef int32_t slot = heap[0].slot
        out[0] = self.pool[slot]
        self.spare[self.nspare] = slot
        self.nspare += 1
        self.n -= 1
        cdef Py_ssize_t n = self.n
        if n == 0:
            return
        cdef HeapKey last = heap[n]
        cdef Event* pool = self.pool
        cdef Py_ssize_t i = 0, c
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and before(pool, &heap[c + 1], &heap[c]):
                c += 1
            if before(pool, &heap[c], &last):
                heap[i] = heap[c]
                i = c
            else:
                break
        heap[i] = last
        __builtin_prefetch(&self.pool[heap[0].slot])  # the next event's, read when it runs
        # and the one after it, most likely heap[1] or heap[2]: when that one is next, its entry is in the
        # cache a whole event early, and _fire asks for the object it runs on before this one runs
        if n > 2:
            __builtin_prefetch(&self.pool[heap[1].slot])
            __builtin_prefetch(&self.pool[heap[2].slot])

    cdef inline int64_t next_t(self) noexcept:
        return self.heap[0].t if self.n else NEVER

    def at(self, t, fn, arg=None):
        self.push(ps_of(t), NULL, fn, arg, NULL, 0)

    def reserve(self):
        """The key the next at() would take, taken (the reference's reserve)."""
        cdef uint32_t c = self.cur_n
        self.cur_n += 1
        return self.cur_h, c

    def at_key(self, t, uint64_t h, uint64_t c, fn, arg=None):
        self.push_key(ps_of(t), h, <uint32_t>c, NULL, fn, arg, NULL, 0)

    def enter(self, uint64_t h):
        was = (self.cur_h, self.cur_n)
        self.cur_h = h
        self.cur_n = 0
        return was

    def leave(self, was):
        self.cur_h, self.cur_n = was

    @property
    def key(self):
        return self.run_h, self.run_c

    @property
    def cur(self):
        return self.cur_h, self.cur_n

    def next_time(self):
        return self.next_t()

    def __len__(self):
        return self.n

    cdef int64_t mapped_at(self, double wall) except? -1:
        return self.anchor_f + c_to_ps((wall - self.anchor_w) / self.idle_dilation)

    def mapped(self, double wall):
        return self.mapped_at(wall)

    def deadline(self, int64_t t):
        return self.anchor_w + c_to_s(t - self.anchor_f) * self.idle_dilation

    cdef int64_t cclock(self) except? -1:
        if self.mode == VIRTUAL:
            return self.now
        if self.busy or self.windowed or (self.n and self.heap[0].t < self.drain_until):
            return self.now
        cdef int64_t f = self.mapped_at(monotonic())
        return f if f > self.now else self.now

    def clock(self):
        return self.cclock()

    def stamp(self):
        if self.mode != ENGINE:
            return self.cclock()
        if not self.paced and (self.busy or self.windowed or (self.n and self.heap[0].t < self.drain_until)):
            return self.now
        cdef int64_t f = self.mapped_at(monotonic())
        return f if f > self.now else self.now

    cdef inline void _take(self, Event* e) noexcept:
        """A popped event is about to run: it is the scheduler of what it schedules."""
        self.run_h = e.h
        self.run_c = e.c
        self.cur_h = c_identity(e.h, e.c)
        self.cur_n = 0

    cdef inline int _run(self, Event* e) except -1:
        """Run a popped event (a Python callback's objects are let go of after it)."""
        if e.fn == _ev_land:  # the commonest: its objects borrowed, as a compiled event's (nothing counted)
            return _landing(e)
        if e.fn != NULL:
            if not e.held:
                return e.fn(<object>e.obj, e.t, <object>e.parg, e.varg, e.iarg)
            try:
                return e.fn(<object>e.obj, e.t, <object>e.parg, e.varg, e.iarg)
            finally:
                Py_XDECREF(e.obj)
        try:
            (<object>e.obj)(e.t, <object>e.parg)
        finally:
            _release(e)
        return 0

    cdef inline int _fire(self, bint keep) except -1:
        """The reference's _fire: pop the next event and run it as the scheduler of what it schedules,
        then give the caller's scheduler back; `keep`: the clock never goes back."""
        cdef Event e
        self._pop(&e)
        cdef char* nxt
        cdef Event* ne
        if self.n:  # the next event's object, read while this one runs (its entry was asked for an event ago)
            ne = &self.pool[self.heap[0].slot]
            nxt = <char*>ne.obj
            __builtin_prefetch(nxt)
            __builtin_prefetch(nxt + 64)
            if ne.fn == _ev_land:  # and a landing's switch, and its frame's header and first bytes
                __builtin_prefetch(ne.parg)
                nxt = <char*>ne.varg
                __builtin_prefetch(nxt)
                __builtin_prefetch(nxt + 64)
                __builtin_prefetch(nxt + 128)
        if not keep or e.t > self.now:
            self.now = e.t
        if e.t > self.top_t or (e.t == self.top_t and (e.h > self.top_h or (e.h == self.top_h and e.c > self.top_c))):
            self.top_t = e.t
            self.top_h = e.h
            self.top_c = e.c
        cdef uint64_t was_h = self.cur_h
        cdef uint32_t was_n = self.cur_n
        self._take(&e)
        self._run(&e)  # an event that raises ends the run loop with its error, the context as it left it
        self.cur_h = was_h
        self.cur_n = was_n
        return 0

    def run_until(self, until_, long long max_events):
        cdef int64_t until = ps_of(until_)
        cdef long long n = 0
        while self.n and self.heap[0].t <= until and n < max_events:
            self._fire(True)
            n += 1
        if until != NEVER and until > self.now:
            self.now = until
        if until != NEVER and not (self.n and self.heap[0].t <= until):
            self._ran_to(until)
        return n

    cdef inline void _ran_to(self, int64_t t) noexcept:
        """Every key up to time t has had its turn (a run stopped with nothing due by t left)."""
        if t >= self.top_t:
            self.top_t = t
            self.top_h = <uint64_t>-1
            self.top_c = <uint32_t>-1

    cdef inline bint own_time(self) noexcept:
        """The schedule is the time (the fabric clock: a job or a window runs, unpaced), so input comes
        only from its events and the order of keys is the whole story: a link may keep an idle end of
        transmission out of the heap. Paced, or idle on the wall, input is stamped from the wall and the
        wall waits for every event."""
        return self.mode == VIRTUAL or (not self.paced and (self.busy or self.windowed))

    def run_due(self, f_):
        cdef int64_t f = ps_of(f_)
        cdef long long n = 0
        while self.n and self.heap[0].t <= f and not self.busy:
            self._fire(True)
            n += 1
        if not (self.n and self.heap[0].t <= f):
            self._ran_to(f)
        return n

    def run_window(self, limit_, long long max_events):
        cdef int64_t limit = ps_of(limit_)
        cdef long long n = 0
        while self.n and n < max_events and self.heap[0].t < limit:
            self._fire(False)
            n += 1
        return n

    def run_job(self, long long max_events):
        cdef long long n = 0
        while self.n and n < max_events and (self.busy or self.heap[0].t < self.drain_until):
            self._fire(False)
            n += 1
        return n

    def run_paced(self, late, limit_):
        cdef int64_t limit = ps_of(limit_)
        cdef long long n = 0
        cdef double wall
        cdef int64_t t
        add = late.add
        while self.n:
            t = self.heap[0].t
            wall = monotonic()
            if t >= limit or t > self.mapped_at(wall):
                break
            add(wall - (self.anchor_w + c_to_s(t - self.anchor_f) * self.idle_dilation))  # read live, as deadline()
            self._fire(True)
            n += 1
        return n


cdef inline void _release(Event* e) noexcept:
    Py_XDECREF(e.obj)
    Py_XDECREF(e.parg)


# -- Python's Mersenne Twister, in C ------------------------------------------------------------------

cdef enum:
    MT_N = 624
    MT_M = 397


cdef inline uint32_t mt_next(MT* s) noexcept nogil:
    """random.Random's genrand_uint32, step for step."""
    cdef uint32_t y
    cdef uint32_t* mt = s.mt
    cdef int kk
    if s.index >= MT_N:
        for kk in range(MT_N - MT_M):
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU)
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ (0x9908b0dfU if y & 1 else 0U)
        for kk in range(MT_N - MT_M, MT_N - 1):
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU)
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ (0x9908b0dfU if y & 1 else 0U)
        y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU)
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ (0x9908b0dfU if y & 1 else 0U)
        s.index = 0
    y = mt[s.index]
    s.index += 1
    y ^= (y >> 11)
    y ^= (y << 7) & 0x9d2c5680U
    y ^= (y << 15) & 0xefc60000U
    y ^= (y >> 18)
    return y


cdef inline double mt_random(MT* s) noexcept nogil:
    """random.Random.random(): 53 bits from two draws, as CPython makes them."""
    cdef uint32_t a = mt_next(s) >> 5
    cdef uint32_t b = mt_next(s) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


cdef void mt_take(MT* s, object rnd) except *:
    """Continue the stream of the Python Random `rnd` from where it is."""
    cdef tuple state = rnd.getstate()[1]
    cdef int i
    for i in range(MT_N):
        s.mt[i] = <uint32_t>state[i]
    s.index = state[MT_N]


# -- the link model (emu.dataplane.pipe.Transmitter) -----------------------------------------------------

cdef enum:
    NQ = 8
    MIN_FRAME = 60
    WIRE_OVERHEAD = 24

cdef int64_t NO_META = -(1LL << 62)  # a queued frame with no meta (None in the reference)


cdef class Target:
    """Where a transmitter delivers: port `port` of switch `sw`, entered by its compiled ingress.
    Callable as the reference's partial(sw.ingress, port) is."""

    def __cinit__(self, SwitchBase sw, int port):
        self.sw = sw
        self.port = port

    def __call__(self, t_, frame):
        cdef int64_t t = ps_of(t_)
        self.sw.ingress(self.port, t, frame)


cdef int _ev_done(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    cdef Transmitter tx = <Transmitter>obj
    tx.busy = False
    tx._start(t)
    return 0


cdef int _ev_wake(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    (<Transmitter>obj)._wake(t)
    return 0


cdef int _ev_land(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    """A link's first frame in flight lands (Schedule.push_land): obj is the link; parg, varg and iarg
    are its flight's target, frame and port. Schedule._run calls _landing on the event instead."""
    cdef Event e
    e.obj = <PyObject*>obj
    e.t = t
    e.parg = <PyObject*>parg
    e.varg = varg
    e.iarg = iarg
    return _landing(&e)


cdef inline int _landing(Event* e) except -1:
    """_ev_land on the event's borrowed pointers: the link is not counted and uncounted (two writes to a
    line among thousands), and the target is borrowed as its flight holds it."""
    (<Transmitter>e.obj)._land()
    if e.iarg >= 0:
        return (<SwitchBase>e.parg).c_ingress(<int>e.iarg, e.t, <Packet*>e.varg)
    return deliver_now(<object>e.parg, e.t, <Packet*>e.varg)


cdef int _ev_to_switch(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    return (<SwitchBase>obj).c_ingress(<int>iarg, t, <Packet*>varg)


cdef int _ev_to_python(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    cdef Packet* p = <Packet*>varg
    frame = packet_bytes(p)
    packet_free(p)
    obj(t, frame)
    return 0


cdef int _ev_to_host(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    return (<HostPort>obj).c_deliver(t, <Packet*>varg)


cdef int _ev_to_sink(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    return (<Sink>obj).take(t, <Packet*>varg)


cdef int deliver_now(object target, int64_t t, Packet* p) except -1:
    """Hand `p` to `target` at once: a switch's port (Target), a host's (HostPort), an endpoint (Sink), or a
    Python callable given bytes."""
    if type(target) is Target:
        return (<Target>target).sw.c_ingress((<Target>target).port, t, p)
    if type(target) is HostPort:
        return (<HostPort>target).c_deliver(t, p)
    if isinstance(target, Sink):
        return (<Sink>target).take(t, p)
    frame = packet_bytes(p)
    packet_free(p)
    target(t, frame)
    return 0


cdef int deliver_at(Schedule sched, object target, int64_t t, Packet* p) except -1:
    """Hand `p` to `target` at `t`: one event, as the reference's loop.at(t, deliver, frame)."""
    cdef uint32_t c = sched.cur_n
    sched.cur_n += 1
    return _deliver_at_key(sched, target, t, sched.cur_h, c, p)


cdef int _deliver_at_key(Schedule sched, object target, int64_t t, uint64_t h, uint32_t c, Packet* p) except -1:
    if type(target) is Target:
        return sched.push_key(t, h, c, _ev_to_switch, (<Target>target).sw, None, p, (<Target>target).port)
    if type(target) is HostPort:
        return sched.push_key(t, h, c, _ev_to_host, target, None, p, 0)
    if isinstance(target, Sink):
        return sched.push_key(t, h, c, _ev_to_sink, target, None, p, 0)
    return sched.push_key(t, h, c, _ev_to_python, target, None, p, 0, 1)  # held: a callable may be let go of


cdef class Sink:
    """Something in the compiled core that takes frames (a compiled endpoint's port): subclassed elsewhere."""

    cdef int take(self, int64_t t, Packet* p) except -1:
        packet_free(p)
        return 0


cdef class HostPort:
    """emu.dataplane.host.HostDelivery, compiled: what a host port hands its host. A capture first; then
    UDP (IPv4 or IPv6) to the port a job's receiver counts on goes to it, MetaRoCE (IPv6, UDP to 4791) to the
    endpoint a job attached there, anything else to the host's kernel (`send`, its drops on `port`)."""

    def __init__(self, send, port, pcap=None):
        self.send = send
        self.port = port
        self.pcap = pcap
        self.roce = None
        self.udp = None
        self.udp_port = -1

    def __call__(self, t_, frame):
        cdef int64_t t = ps_of(t_)
        self.c_deliver(t, packet_from(frame))

    cdef int c_deliver(self, int64_t t, Packet* p) except -1:
        if self.pcap is not None:
            self.pcap.write(t, packet_bytes(p))
        cdef const uint8_t* f = p.data
        cdef int n = p.len
        if self.udp is not None and n > 41 and f[12] == 8 and f[13] == 0 and f[23] == 17 and f[14] == 0x45 \
                and (f[36] << 8 | f[37]) == self.udp_port:
            return deliver_now(self.udp, t, p)
        if self.udp is not None and n > 61 and f[12] == 0x86 and f[13] == 0xDD and f[20] == 17 \
                and (f[56] << 8 | f[57]) == self.udp_port:
            return deliver_now(self.udp, t, p)
        if self.roce is not None and n > 62 and f[12] == 0x86 and f[13] == 0xDD and f[20] == 17 \
                and f[56] == 0x12 and f[57] == 0xB7:
            return deliver_now(self.roce, t, p)
        if type(self.send) is KernelPort:
            return (<KernelPort>self.send).c_send(p, self.port)
        frame = packet_bytes(p)
        packet_free(p)
        try:
            self.send(frame)
        except OSError:
            self.port.drop("tx_error")
        return 0


cdef extern from "sys/socket.h" nogil:
    ssize_t c_send "send" (int fd, const void* buf, size_t n, int flags)

cdef extern from "errno.h" nogil:
    int errno


cdef enum:
    TP_STATUS_USER = 1
    TP_STATUS_COPY = 2
    TP_STATUS_VLAN_VALID = 0x10
    TP_STATUS_VLAN_TPID_VALID = 0x40


cdef class KernelPort:
    """A port's packet socket and receive ring (emu.dataplane.ring.RxRing), read and written compiled: what
    the kernel handed the ring goes into the switch, what the switch sends goes out with send(2), and
    Python is called once per burst, not per frame. The reference reads the ring through RxRing's mmap
    and sends with socket.send."""

    def __init__(self, ring, int fd, SwitchBase sw, int port, bint from_host):
        self.ring = ring
        self.view = memoryview(ring.mm)
        cdef Py_buffer buf
        PyObject_GetBuffer(self.view, &buf, PyBUF_SIMPLE)
        self.base = <uint8_t*>buf.buf
        PyBuffer_Release(&buf)  # the memoryview holds the export
        self.frame_size = ring.frame_size
        self.frames = ring.frames
        self.index = ring.index
        self.fd = fd
        self.sw = sw
        self.port = port
        self.from_host = from_host
        self.truncated = 0

    def close(self):
        """Let go of the ring's memory, so that RxRing.close() can unmap it."""
        self.view.release()
        self.base = NULL

    def read(self, now_, int limit):
        """Up to `limit` slots the kernel filled, into the switch at `now` (RxRing.frames_ready's order,
        VLAN tags put back, truncated frames counted and dropped); how many frames went in."""
        cdef int64_t now = ps_of(now_)
        cdef int n = 0, got = 0
        cdef uint8_t* slot
        cdef uint32_t status, length, snap
        cdef uint16_t mac, tci, tpid
        cdef Packet* p
        if self.base == NULL:
            return 0
        while n < limit:
            slot = self.base + self.index * self.frame_size
            status = (<uint32_t*>slot)[0]
            if not status & TP_STATUS_USER:
                break
            length = (<uint32_t*>slot)[1]
            snap = (<uint32_t*>slot)[2]
            mac = (<uint16_t*>(slot + 12))[0]
            tci = (<uint16_t*>(slot + 24))[0]
            tpid = (<uint16_t*>(slot + 26))[0]
            p = NULL
            if status & TP_STATUS_COPY or snap < length:
                self.truncated += 1
            elif status & TP_STATUS_VLAN_VALID:
                p = packet_new(snap + 4)
                memcpy(p.data, slot + mac, 12)
                tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                p.data[12], p.data[13], p.data[14], p.data[15] = tpid >> 8, tpid & 0xFF, tci >> 8, tci & 0xFF
                memcpy(p.data + 16, slot + mac + 12, snap - 12)
            else:
                p = packet_new(snap)
                memcpy(p.data, slot + mac, snap)
            (<uint32_t*>slot)[0] = 0  # the slot back to the kernel
            self.index = self.index + 1 if self.index + 1 < self.frames else 0
            n += 1
            if p == NULL:
                continue
            got += 1
            if self.from_host:
                self.sw.c_from_host(self.port, now, p)
            else:
                self.sw.c_ingress(self.port, now, p)
        self.ring.index = self.index
        return got

    cdef int c_send(self, Packet* p, object port) except -1:
        """socket.send(frame); a refusal (the socket's buffer full, the link gone) dropped as tx_error."""
        if p.flags & PENDING:
            materialize(p)
        cdef ssize_t r = c_send(self.fd, p.data, p.len, 0)
        packet_free(p)
        if r < 0:
            port.drop("tx_error")
        return 0

    def __call__(self, frame):
        self.c_send(packet_from(frame), self.sw.ports[self.port])


cdef class FromHost:
    """What a host sends into its switch port's NIC model, now (the reference's send: the switch's
    from_host at the schedule's time); a compiled endpoint calls it without Python."""

    def __init__(self, SwitchBase sw, int port):
        self.sw = sw
        self.port = port

    def __call__(self, frame):
        self.sw.c_from_host(self.port, self.sw.sched.now, packet_from(frame))


cdef class Transmitter:
    """emu.dataplane.pipe.Transmitter, compiled: the same queues, pauses, DWRR and wire, in the same order."""

    def __init__(self, loop, *, str name, double rate_bps, delay_ps, deliver, on_dequeue=None,
                 strict=(7, 6), weights=(1,) * NQ, int64_t limit_bytes=0):
        if not rate_bps > 0:
            raise ValueError(f"{name}: link rate must be positive, got {rate_bps}")
        if type(delay_ps) is not int or delay_ps < 0:
            raise ValueError(f"{name}: propagation delay must be whole picoseconds >= 0, got {delay_ps!r}")
        cdef int q
        self.loop = loop
        self.sched = <Schedule?>loop.sched
        self.name = name
        self.rate_bps = 0 if rate_bps == INFINITY else c_rate_of(rate_bps)
        self.delay_ps = delay_ps
        self._deliver_to(deliver)
        self.retired = None
        self.dequeue = on_dequeue
        if type(on_dequeue) is Target and (<Target>on_dequeue).port >= 0:
            self.dq_sw = (<Target>on_dequeue).sw
            self.dq_port = (<Target>on_dequeue).port
        else:
            self.dq_sw = None
        for q in range(NQ):
            self.qs[q].head = NULL
            self.qs[q].tail = NULL
            self.qs[q].qb = 0
            self.qs[q].hwm = 0
            self.qs[q].pause_until = 0
            self.pause_since[q] = -1
            self.paused_time[q] = 0
            self.qs[q].deficit = 0
            self.qs[q].qtx = 0
        self.busy = False
        self.kept = False
        order = sorted(strict, reverse=True)
        self.nstrict = len(order)
        for q in range(self.nstrict):
            self.strict[q] = order[q]
        self.mask = 0
        self.dwrr_mask = 0xFF & ~sum(1 << q for q in strict)
        for q in range(NQ):
            self.qs[q].quantum = max(1, weights[q]) * 1600
        self.rr = 0
        self.visiting = False
        self.wake_at = -1
        self.up = True
        self.tx_packets = 0
        self.tx_bytes = 0
        self.limit_bytes = limit_bytes
        self.drops = 0
        self.loss = 0.0
        self.lost = 0
        self.base_rate = self.rate_bps
        self.base_delay = delay_ps

    def __cinit__(self):
        self.rng = NULL
        self.fly = NULL
        self.fly_cap = 0
        self.fly_head = 0
        self.nfly = 0

    def __dealloc__(self):
        cdef int q
        cdef Packet* p
        for q in range(NQ):
            while self.qs[q].head != NULL:
                p = self.qs[q].head
                self.qs[q].head = p.next
                packet_free(p)
        free(self.fly)  # frames still in flight at the end are the process's to reclaim
        free(self.rng)

    # Python's view of it, for the reference's code that reads it (statistics, cut, degrade)
    @property
    def deliver(self):
        return self.dv

    @deliver.setter
    def deliver(self, value):
        if self.nfly:  # frames in flight hold the old one borrowed
            if self.retired is None:
                self.retired = []
            self.retired.append(self.dv)
        self._deliver_to(value)

    cdef void _deliver_to(self, object value) noexcept:
        """Where frames land from now on; a switch's port is kept as the switch and its index, so that a
        landing frame goes to the switch without reading the Target (a cache miss a hop at thousands of
        links)."""
        self.dv = value
        if type(value) is Target and (<Target>value).port >= 0:
            self.dv_sw = (<Target>value).sw
            self.dv_port = (<Target>value).port
        else:
            self.dv_sw = None
            self.dv_port = -1

    @property
    def qbytes(self):
        return [self.qs[q].qb for q in range(NQ)]

    @property
    def qhwm(self):
        return [self.qs[q].hwm for q in range(NQ)]

    @property
    def q_tx_packets(self):
        return [self.qs[q].qtx for q in range(NQ)]

    @property
    def base(self):
        return (self.base_rate, self.base_delay)

    @base.setter
    def base(self, value):
        self.base_rate, self.base_delay = value

    @property
    def on_dequeue(self):
        return self.dequeue

    # -- queueing ----------------------------------------------------------------------------------

    cdef bint c_enqueue(self, int64_t t, int prio, Packet* p, int64_t meta) except -1:
        """Takes `p` (frees it when refused)."""
        cdef int n = p.len
        cdef int64_t end
        if self.limit_bytes and self.qs[prio].qb + n > self.limit_bytes:
            self.drops += 1
            packet_free(p)
            return False
        self._settle(t)
        if not self.busy and not self.mask and self.qs[prio].pause_until <= t:
            end = self._send(t, prio, p, meta)
            if end >= 0:
                self._start(end)
            return True
        p.meta = meta
        p.next = NULL
        if self.qs[prio].tail == NULL:
            self.qs[prio].head = p
        else:
            self.qs[prio].tail.next = p
        self.qs[prio].tail = p
        self.mask |= 1 << prio
        cdef int64_t b = self.qs[prio].qb + n
        self.qs[prio].qb = b
        if b > self.qs[prio].hwm:
            self.qs[prio].hwm = b
        if not self.busy:
            self._start(t)
        elif self.kept:  # its turn not come: in the heap now, in its place, to send what waits
            self.kept = False
            self.sched.push_key(self.end_t, self.end_h, self.end_c, _ev_done, self, None, NULL, 0)
        return True

    def enqueue(self, t_, int prio, frame, meta=None):
        cdef int64_t t = ps_of(t_)
        return self.c_enqueue(t, prio, packet_from(frame), NO_META if meta is None else <int64_t>meta)

    cdef int _pick(self, int64_t t) except? -2:
        cdef int mask = self.mask
        cdef int i, q, m, k
        cdef int size
        for i in range(self.nstrict):
            q = self.strict[i]
            if mask >> q & 1 and self.qs[q].pause_until <= t:
                return q
        m = mask & self.dwrr_mask
        if not m:
            return -1
        if not m & (m - 1):
            q = 0
            while m >> (q + 1):
                q += 1
            return q if self.qs[q].pause_until <= t else -1
        for k in range(2 * NQ):
            q = self.rr
            if m >> q & 1 and self.qs[q].pause_until <= t:
                if not self.visiting:
                    self.qs[q].deficit += self.qs[q].quantum
                    self.visiting = True
                size = self.qs[q].head.len
                if self.qs[q].deficit >= size:
                    self.qs[q].deficit -= size
                    return q
            elif not m >> q & 1:
                self.qs[q].deficit = 0
            self.rr = (q + 1) % NQ
            self.visiting = False
        return -1

    cdef int _start(self, int64_t t) except -1:
        cdef int q
        cdef Packet* p
        while self.mask:
            q = self._pick(t)
            if q < 0:
                self.busy = False
                self._arm_wake(t)
                return 0
            p = self.qs[q].head
            self.qs[q].head = p.next
            if self.qs[q].head == NULL:
                self.qs[q].tail = NULL
                self.mask &= ~(1 << q)
            self.qs[q].qb -= p.len
            t = self._send(t, q, p, p.meta)
            if t < 0:
                return 0
        self.busy = False
        return 0

    cdef int64_t _send(self, int64_t t, int q, Packet* p, int64_t meta) except? -2:
        """Put one frame on the wire at t (reference: Transmitter._send). Takes `p`."""
        if self.dq_sw is not None:
            self.dq_sw.c_dequeued(self.dq_port, t, q, p, meta)
        elif self.dequeue is not None:
            frame = packet_bytes(p)
            out = self.dequeue(t, q, frame, None if meta == NO_META else meta)
            if out is not frame:
                packet_free(p)
                p = packet_from(out)
        cdef int n = p.len
        self.busy = True
        cdef int64_t end = t
        if self.rate_bps:
            end += c_ser_ps((n if n > MIN_FRAME else MIN_FRAME) + WIRE_OVERHEAD, self.rate_bps)
        self.tx_packets += 1
        self.tx_bytes += n
        self.qs[q].qtx += 1
        cdef int64_t arrive = end + self.delay_ps
        cdef Schedule sched = self.sched
        cdef bint up = self.up
        if up and self.loss and self.rng != NULL and mt_random(self.rng) < self.loss:
            self.lost += 1
            up = False
        if arrive <= sched.cclock() and sched.next_t() >= arrive:
            if up:
                deliver_now(self.dv, arrive, p)
            else:
                packet_free(p)
            if not self.mask:
                self.busy = False
                return -1
            return end
        if self.mask or end <= sched.top_t or not sched.own_time():
            sched.push(end, _ev_done, self, None, NULL, 0)
        else:  # nothing queued behind it: its end's key is taken, the event made only if a frame comes first
            self.kept = True
            self.end_t = end
            self.end_h = sched.cur_h
            self.end_c = sched.cur_n
            sched.cur_n += 1
        if up:
            self._fly(arrive, p)
        else:
            packet_free(p)
        return -1

    cdef int _fly(self, int64_t arrive, Packet* p) except -1:
        """The frame lands at `arrive`: the reference's loop.at(arrive, deliver, frame), whose place in the
        order (its tie key) is taken now. Frames in flight on a link land in the order they left
        it, so they wait in the link's FIFO and only the first is in the schedule's heap: the heap holds a
        link's flight once, not each frame (htsim's pipe), and pops in the same order."""
        cdef Schedule sched = self.sched
        cdef uint64_t h = sched.cur_h
        cdef uint32_t c = sched.cur_n
        sched.cur_n += 1
        cdef Flight* f
        if self.nfly and arrive < self.fly[(self.fly_head + self.nfly - 1) & (self.fly_cap - 1)].t:
            # A shorter cable than the frame ahead of it had (a degradation undone): not behind it in the
            # FIFO; an event of its own, in the same place in the order.
            return _deliver_at_key(sched, self.dv, arrive, h, c, p)
        if self.nfly == self.fly_cap:
            self._grow_fly()
        f = &self.fly[(self.fly_head + self.nfly) & (self.fly_cap - 1)]
        f.t = arrive
        f.h = h
        f.c = c
        f.p = p
        if self.dv_sw is not None:  # borrowed: the link keeps what it delivered to (deliver's setter), and a
            # Target its switch
            f.target = <PyObject*>self.dv_sw
            f.port = self.dv_port
        else:
            f.target = <PyObject*>self.dv
            f.port = -1
        self.nfly += 1
        if self.nfly == 1:
            sched.push_land(self, f)
        return 0

    cdef int _grow_fly(self) except -1:
        cdef Py_ssize_t cap = max(16, 2 * self.fly_cap), i
        cdef Flight* a = <Flight*>malloc(cap * sizeof(Flight))
        if a == NULL:
            raise MemoryError()
        for i in range(self.nfly):
            a[i] = self.fly[(self.fly_head + i) & (self.fly_cap - 1)]
        free(self.fly)
        self.fly = a
        self.fly_cap = cap
        self.fly_head = 0
        return 0

    cdef int _land(self) except -1:
        """The first frame in flight leaves the FIFO (its event carries it: _ev_land delivers it); the next
        one takes its place in the heap."""
        self.fly_head = (self.fly_head + 1) & (self.fly_cap - 1)
        self.nfly -= 1
        if self.nfly:
            self.sched.push_land(self, &self.fly[self.fly_head])
        return 0

    def degrade(self, *, double loss, double rate_bps, int64_t extra_delay_ps, seed):
        """The reference's degrade; what can fail (the seed, the rate, memory) fails before anything changes."""
        import random

        cdef int64_t rate = c_rate_of(rate_bps) if rate_bps else self.base_rate
        cdef MT* rng = NULL
        if loss:
            stream = random.Random(seed)
            rng = <MT*>malloc(sizeof(MT))
            if rng == NULL:
                raise MemoryError()
            mt_take(rng, stream)
        self.rate_bps = rate
        self.delay_ps = self.base_delay + extra_delay_ps
        self.loss = loss
        free(self.rng)
        self.rng = rng

    @property
    def rng(self):
        return True if self.rng != NULL else None

    cdef int _arm_wake(self, int64_t t) except -1:
        cdef int64_t wake = -1
        cdef bint found = False
        cdef int q
        for q in range(NQ):
            if self.mask >> q & 1 and self.qs[q].pause_until > t:
                if not found or self.qs[q].pause_until < wake:
                    wake = self.qs[q].pause_until
                    found = True
        if wake > 0 and (self.wake_at <= t or wake < self.wake_at):
            self.wake_at = wake
            self.sched.push(wake, _ev_wake, self, None, NULL, 0)
        return 0

    cdef inline void _settle(self, int64_t t) noexcept:
        """The link's kept end of transmission, at t: if its turn has come (the event would have run, found
        nothing queued and left the link idle), the link is idle. Its turn has come once t is past it, or at
        its time once a greater key has run (the schedule's top): the reference's end, in its heap all along,
        runs before any greater key."""
        if not self.kept:
            return
        cdef Schedule s = self.sched
        if t > self.end_t or (t == self.end_t and (
                s.top_t > self.end_t or (s.top_t == self.end_t and (
                    s.top_h > self.end_h or (s.top_h == self.end_h and s.top_c > self.end_c))))):
            self.kept = False
            self.busy = False

    cdef int _wake(self, int64_t t) except -1:
        if t >= self.wake_at:
            self.wake_at = -1
        self._settle(t)
        if not self.busy:
            self._start(t)
        return 0

    # -- PFC on receipt ----------------------------------------------------------------------------

    cdef int c_pause(self, int64_t t, int vector, const uint16_t* quanta) except -1:
        cdef int prio
        cdef int64_t since
        for prio in range(NQ):
            if not vector >> prio & 1:
                continue
            since = self.pause_since[prio]
            if since >= 0 and self.qs[prio].pause_until <= t:
                self.paused_time[prio] += self.qs[prio].pause_until - since
                since = -1
            if quanta[prio]:
                if since < 0:
                    since = t
                self.qs[prio].pause_until = t + c_pause_ps(quanta[prio], self.rate_bps)
            else:
                if since >= 0:
                    self.paused_time[prio] += t - since
                    since = -1
                self.qs[prio].pause_until = 0
            self.pause_since[prio] = since
        self._settle(t)
        if not self.busy:
            self._start(t)
        return 0

    def pause(self, t_, dict times):
        cdef int64_t t = ps_of(t_)
        cdef uint16_t quanta[8]
        cdef int vector = 0
        for prio, value in times.items():
            vector |= 1 << prio
            quanta[prio] = value
        if any(p < 0 for p in times) or sorted(times) != list(times):
            raise ValueError("pause times by priority, ascending")
        self.c_pause(t, vector, quanta)

    def paused_ps(self, t_):
        cdef int64_t t = ps_of(t_)
        out = [self.paused_time[q] for q in range(NQ)]
        for q in range(NQ):
            if self.pause_since[q] >= 0:
                out[q] += min(t, self.qs[q].pause_until) - self.pause_since[q]
        return out

    def set_up(self, bint up):
        self.up = up

    def queued(self):
        return sum(self.qs[q].qb for q in range(NQ))


# -- the shared buffer (emu.dataplane.buffer.SharedBuffer) --------------------------------------------

cdef enum:
    ADMIT = 0
    HEADROOM_EXHAUSTED = 1
    BUFFER_FULL = 2
    EGRESS_THRESHOLD = 3

REASONS = (None, "headroom_exhausted", "buffer_full", "egress_threshold")


cdef class SharedBuffer:
    """emu.dataplane.buffer.SharedBuffer, compiled: per (port, priority) counters in one flat C array of
    32-byte entries (Occ): a frame's admission, charge and release read its ingress entry and its egress
    entry (and its ingress port's headroom), where four arrays made them four or five lines."""

    def __init__(self, *, int nports, int64_t size, list headroom, int64_t reserve=4096, int shift=3,
                 double egress_alpha=1.0, int64_t resume_offset=3072):
        if len(headroom) != nports:
            raise ValueError("one headroom value per port is needed")
        self.nports = nports
        self.size = size
        self.reserve = reserve
        self.shift = shift
        self.egress_alpha = egress_alpha
        self.resume_offset = resume_offset
        self.hroom = <int64_t*>malloc(nports * sizeof(int64_t))
        self.occ = <Occ*>aligned_alloc(64, max(64, nports * NQ * sizeof(Occ)))
        if not (self.hroom and self.occ):
            raise MemoryError()
        memset(self.occ, 0, nports * NQ * sizeof(Occ))
        cdef int i
        for i in range(nports):
            self.hroom[i] = headroom[i]
        self.shared_used = 0
        self.used = 0
        self.total_headroom = sum(headroom)
        self.total_reserve = reserve * nports * NQ
        if self.total_headroom + self.total_reserve >= size:
            raise ValueError(
                f"buffer of {size} B cannot hold headroom {self.total_headroom} B + "
                f"reserve {self.total_reserve} B; raise the buffer or shorten the links"
            )

    def __dealloc__(self):
        free(self.hroom)
        free(self.occ)

    @property
    def headroom(self):
        return [self.hroom[i] for i in range(self.nports)]

    @property
    def xoff(self):
        return [[bool(self.occ[i * NQ + q].xo) for q in range(NQ)] for i in range(self.nports)]

    def set_headroom(self, int port, int64_t nbytes):
        cdef int64_t total = self.total_headroom + nbytes - self.hroom[port]
        if nbytes < 0 or total + self.total_reserve >= self.size:
            raise ValueError(f"headroom {nbytes} B on port {port} does not fit a {self.size} B buffer")
        self.total_headroom = total
        self.hroom[port] = nbytes

    cdef inline int64_t threshold(self) noexcept:
        cdef int64_t free_ = self.size - self.total_headroom - self.total_reserve - self.shared_used
        return free_ >> self.shift if free_ > 0 else 0

    cdef inline int64_t _shared(self, int port, int q) noexcept:
        cdef int64_t over = self.occ[port * NQ + q].ing - self.reserve
        return over if over > 0 else 0

    cdef int admit(self, int inp, int q, int outp, int64_t size, bint lossless) noexcept:
        cdef int64_t free_
        if lossless:
            if size + self.occ[inp * NQ + q].hdr > self.hroom[inp] and size + self._shared(inp, q) > self.threshold():
                return HEADROOM_EXHAUSTED
            return ADMIT
        if self.used + size > self.size - self.total_headroom:
            return BUFFER_FULL
        free_ = self.size - self.total_headroom - self.total_reserve - self.shared_used
        if <double>(self.occ[outp * NQ + q].egr + size) > self.reserve + self.egress_alpha * free_:
            return EGRESS_THRESHOLD
        return ADMIT

    cdef void charge(self, int inp, int q, int outp, int64_t size, bint lossless) noexcept:
        self.occ[outp * NQ + q].egr += size
        self.used += size
        cdef int64_t new = self.occ[inp * NQ + q].ing + size
        cdef int64_t over = new - self.reserve
        if over <= 0:
            self.occ[inp * NQ + q].ing = new
            return
        if lossless and over > self.threshold():
            self.occ[inp * NQ + q].hdr += size
            return
        self.occ[inp * NQ + q].ing = new
        self.shared_used += size if size < over else over

    cdef void release(self, int inp, int q, int outp, int64_t size) noexcept:
        self.occ[outp * NQ + q].egr -= size
        self.used -= size
        cdef int64_t h = self.occ[inp * NQ + q].hdr
        cdef int64_t take
        if h:
            take = h if h < size else size
            self.occ[inp * NQ + q].hdr = h - take
            size -= take
            if not size:
                return
        cdef int64_t old = self.occ[inp * NQ + q].ing
        cdef int64_t new = old - size
        self.occ[inp * NQ + q].ing = new
        cdef int64_t r = self.reserve
        self.shared_used -= (old - r if old > r else 0) - (new - r if new > r else 0)

    cdef bint should_pause(self, int port, int q) noexcept:
        if self.occ[port * NQ + q].xo:
            return False
        if self.occ[port * NQ + q].hdr > 0:
            return True
        cdef int64_t shared = self._shared(port, q)
        cdef int64_t thr = self.threshold()
        return (shared >= thr and thr > 0) or (shared > 0 and thr == 0)

    cdef bint should_resume(self, int port, int q) noexcept:
        if not self.occ[port * NQ + q].xo or self.occ[port * NQ + q].hdr:
            return False
        cdef int64_t shared = self._shared(port, q)
        return shared == 0 or shared + self.resume_offset <= self.threshold()


# -- lookups (emu.dataplane.tables) ------------------------------------------------------------------

cdef inline uint64_t _mix(uint64_t hi, uint64_t lo) noexcept nogil:
    cdef uint64_t h = lo * 0x9E3779B97F4A7C15ULL ^ hi * 0xC2B2AE3D27D4EB4FULL
    return h ^ (h >> 29)


cdef TEntry* _entries(Py_ssize_t n) except NULL:
    """n empty slots (a power of two, at least 8: a whole number of lines, as aligned_alloc asks), aligned so
    that no slot crosses a cache line."""
    cdef TEntry* e = <TEntry*>aligned_alloc(64, n * sizeof(TEntry))
    if e == NULL:
        raise MemoryError()
    memset(e, 0, n * sizeof(TEntry))
    return e


cdef class Table:
    """An exact-match table of 128-bit keys (hi, lo) to Python objects: open addressing, no allocation
    on look-up. A slot's key and value share 32 bytes (TEntry), so a probe reads one cache line, not one in
    each of three arrays: a frame's route is looked up at every switch, in tables the cache does not hold
    at thousands of switches. `borrowed`: it holds no reference to its values (the owner's own containers
    do), since the cycle collector cannot see references held here: a table of objects that refer back to
    its owner would keep them all alive."""

    def __cinit__(self, bint borrowed=False):
        self.borrowed = borrowed
        self.cap = 8
        self.count = 0
        self.e = _entries(self.cap)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.e != NULL and not self.borrowed:
            for i in range(self.cap):
                Py_XDECREF(self.e[i].val)
        free(self.e)

    cdef PyObject* get(self, uint64_t hi, uint64_t lo) noexcept:
        cdef Py_ssize_t m = self.cap - 1
        cdef TEntry* e = &self.e[<Py_ssize_t>(_mix(hi, lo) & m)]
        while e.val != NULL:
            if e.hi == hi and e.lo == lo:
                return e.val
            e = &self.e[(e - self.e + 1) & m]
        return NULL

    cdef int put(self, uint64_t hi, uint64_t lo, object value) except -1:
        cdef Py_ssize_t m, i
        if 2 * (self.count + 1) > self.cap:
            self._grow()
        m = self.cap - 1
        i = <Py_ssize_t>(_mix(hi, lo) & m)
        while self.e[i].val != NULL:
            if self.e[i].hi == hi and self.e[i].lo == lo:
                if not self.borrowed:
                    Py_INCREF(value)
                    Py_XDECREF(self.e[i].val)
                self.e[i].val = <PyObject*>value
                return 0
            i = (i + 1) & m
        self.e[i].hi = hi
        self.e[i].lo = lo
        if not self.borrowed:
            Py_INCREF(value)
        self.e[i].val = <PyObject*>value
        self.count += 1
        return 0

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old = self.cap, i, j, m
        cdef TEntry* olde = self.e
        cdef TEntry* e = _entries(2 * old)
        self.e = e
        self.cap = 2 * old
        m = self.cap - 1
        for i in range(old):
            if olde[i].val != NULL:
                j = <Py_ssize_t>(_mix(olde[i].hi, olde[i].lo) & m)
                while e[j].val != NULL:
                    j = (j + 1) & m
                e[j] = olde[i]
        free(olde)
        return 0


cdef inline void _split(object addr, uint64_t* hi, uint64_t* lo):
    hi[0] = <uint64_t>(addr >> 64)
    lo[0] = <uint64_t>(addr & 0xFFFFFFFFFFFFFFFF)


cdef inline void _shift(uint64_t hi, uint64_t lo, int s, uint64_t* ohi, uint64_t* olo) noexcept nogil:
    if s == 0:
        ohi[0] = hi
        olo[0] = lo
    elif s >= 128:
        ohi[0] = 0
        olo[0] = 0
    elif s >= 64:
        ohi[0] = 0
        olo[0] = hi >> (s - 64)
    else:
        ohi[0] = hi >> s
        olo[0] = (lo >> s) | (hi << (64 - s))


cdef class Lpm:
    """emu.dataplane.tables.Lpm, compiled: one exact-match table per prefix length, longest first."""

    def __init__(self, int bits):
        self.bits = bits
        self.by_len = {}
        self.nlen = 0

    def add(self, str prefix, value):
        from emu.dataplane.tables import parse_prefix

        bits, plen_, network = parse_prefix(prefix)
        if bits != self.bits:
            raise ValueError(f"{prefix} is not an IPv{4 if self.bits == 32 else 6} prefix")
        cdef int plen = plen_
        cdef int shift = self.bits - plen
        cdef uint64_t hi, lo
        _split(network >> shift, &hi, &lo)
        table = self.by_len.get(plen)
        if table is None:
            table = self.by_len[plen] = Table()
        (<Table>table).put(hi, lo, value)
        order = sorted(self.by_len, reverse=True)
        self.nlen = len(order)
        for i, p in enumerate(order):
            self.shifts[i] = self.bits - p
            self.tables[i] = <PyObject*>self.by_len[p]

    cdef PyObject* c_lookup(self, uint64_t hi, uint64_t lo) noexcept:
        cdef int i
        cdef uint64_t khi, klo
        cdef PyObject* v
        for i in range(self.nlen):
            _shift(hi, lo, self.shifts[i], &khi, &klo)
            v = (<Table>self.tables[i]).get(khi, klo)
            if v != NULL:
                return v
        return NULL

    def lookup(self, addr):
        cdef uint64_t hi, lo
        _split(addr, &hi, &lo)
        cdef PyObject* v = self.c_lookup(hi, lo)
        return None if v == NULL else <object>v

    def __len__(self):
        return sum((<Table>t).count for t in self.by_len.values())


cdef class GroupState:
    """emu.dataplane.tables.GroupState, compiled: its slot table in C arrays for the hot path; the
    reference object computes the slots (weights, members gone down) and this copies them, one 16-byte
    Slot (MACs and port) each."""

    def __init__(self, group, list port_macs):
        from emu.dataplane.tables import GroupState as Reference

        self.ref = Reference(group, port_macs)
        self.id = self.ref.id
        self.spray = self.ref.spray
        self.rr = 0
        self.nslots = 0
        self.slot = NULL
        self._copy()

    def __dealloc__(self):
        free(self.slot)

    cdef int _copy(self) except -1:
        slots = self.ref.slots
        cdef int n = len(slots), i
        cdef Slot* a = <Slot*>malloc(max(1, n) * sizeof(Slot))  # 16-byte aligned: a slot in one line
        if a == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                a[i].port = slots[i][0]
                memcpy(a[i].l2, <char*>(<bytes>slots[i][1]), 12)
        except BaseException:
            free(a)
            raise
        free(self.slot)
        self.slot = a
        self.nslots = n
        return 0

    @property
    def n(self):
        return self.nslots

    @property
    def slots(self):
        return self.ref.slots

    @property
    def members(self):
        return self.ref.members

    def set_port_state(self, int port, bint up):
        changed = self.ref.set_port_state(port, up)
        if changed:
            self._copy()
        return changed

    cdef inline int c_pick(self, uint32_t flow_hash) noexcept:
        """The slot for this packet, or -1 (no live member)."""
        cdef int n = self.nslots
        if not n:
            return -1
        cdef int r
        if self.spray:
            r = self.rr + 1
            if r >= n:  # (rr + 1) % n, without a division on every frame (rr may exceed a group that shrank)
                r = r % n
            self.rr = r
            return r
        return flow_hash % n

    def pick(self, flow_hash):
        cdef int n = self.nslots
        if not n:
            return None
        if self.spray:
            self.rr = (self.rr + 1) % n
            return self.ref.slots[self.rr]
        return self.ref.slots[flow_hash % n]


# -- the switch (emu.dataplane.pipeline.Switch's forwarding path) --------------------------------------

cdef enum:
    CONTROL_TC = 7
    PFC_XOFF = 0xFFFF
    TRIMMED = -1
    ETH_IPV4 = 0x0800
    ETH_IPV6 = 0x86DD
    ETH_ARP = 0x0806
    ETH_VLAN = 0x8100
    ETH_MAC_CONTROL = 0x8808
    ETH_PROBE = 0x88B5

# Solicited-node multicast ff02::1:ff00:0/104: the high 104 bits, as (hi, lo >> 24)
cdef uint64_t SOLICITED_HI = 0xff02000000000000ULL
cdef uint64_t SOLICITED_LO24 = 0x1ffULL

cdef uint32_t CRC_TABLE[256]


cdef void _crc_init() noexcept:
    cdef uint32_t c
    cdef int i, k
    for i in range(256):
        c = i
        for k in range(8):
            c = (c >> 1) ^ 0xEDB88320U if c & 1 else c >> 1
        CRC_TABLE[i] = c


_crc_init()


cdef uint32_t crc32(const uint8_t* data, int n, uint32_t start) noexcept nogil:
    """zlib.crc32(data, start)."""
    cdef uint32_t c = ~start
    cdef int i
    for i in range(n):
        c = CRC_TABLE[(c ^ data[i]) & 0xFF] ^ (c >> 8)
    return ~c


def crc32_of(bytes data, uint32_t start=0):
    """zlib.crc32, for tests of the compiled one."""
    return crc32(<const uint8_t*><char*>data, len(data), start)


cdef inline uint64_t _be64(const uint8_t* b) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = v << 8 | b[i]
    return v


cdef inline int _traffic_class(const uint8_t* dscp_tc, const uint8_t* f, int n) noexcept nogil:
    """emu.dataplane.pipeline.traffic_class."""
    if n < 15:
        return 0
    cdef int et = f[12] << 8 | f[13]
    if et == ETH_IPV4 and n > 15:
        return dscp_tc[f[15] >> 2]
    cdef int l3 = 14
    if et == ETH_VLAN and n >= 19:
        et = f[16] << 8 | f[17]
        l3 = 18
    if et == ETH_IPV4 and n > l3 + 1:
        return dscp_tc[f[l3 + 1] >> 2]
    if et == ETH_IPV6 and n > l3 + 1:
        return dscp_tc[((f[l3] & 0x0F) << 2) | (f[l3 + 1] >> 6)]
    if et == ETH_ARP:
        return CONTROL_TC
    return 0


cdef class Port:
    """emu.dataplane.pipeline.Port, compiled: its counters in C, seen by Python as the reference's."""

    def __init__(self, int index, str name, bytes mac, str peer_kind):
        self.index = index
        self.name = name
        self.mac = mac
        memcpy(self.cmac, <char*>mac, 6)
        self.peer_kind = peer_kind
        self.peer_mac = b""
        self.tx = None
        self.nic = None
        self.ip4 = {}
        self.ip6 = {}
        self.rx_packets = 0
        self.rx_bytes = 0
        self.drops = {}
        cdef int q
        for q in range(NQ):
            self.c_drops_tc[q] = 0
            self.c_q_enq[q] = 0
            self.c_over_kmax[q] = 0
            self.c_trimmed[q] = 0
        self.ecn_marked = 0
        self.pfc_tx = 0
        self.pfc_rx = 0
        self.up = True
        self.rate_bps = 0
        self.delay_ps = 0

    cdef int c_drop(self, str reason, int tc) except -1:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if tc >= 0:
            self.c_drops_tc[tc] += 1
        return 0

    def drop(self, str reason, int tc=-1):
        self.c_drop(reason, tc)

    @property
    def drops_tc(self):
        return [self.c_drops_tc[q] for q in range(NQ)]

    @property
    def q_enq(self):
        return [self.c_q_enq[q] for q in range(NQ)]

    @property
    def q_over_kmax(self):
        return [self.c_over_kmax[q] for q in range(NQ)]

    @property
    def trimmed(self):
        return [self.c_trimmed[q] for q in range(NQ)]


cdef int _ev_host_paused(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    """Switch._host_paused: the PFC frame reached the host's NIC model (iarg: port | vector << 32 |
    xoff << 40)."""
    cdef SwitchBase sw = <SwitchBase>obj
    cdef Port p = <Port>sw.ports[iarg & 0xFFFFFFFF]
    cdef uint16_t quanta[8]
    cdef int q
    cdef uint16_t value = PFC_XOFF if iarg >> 40 & 1 else 0
    for q in range(NQ):
        quanta[q] = value
    if p.nic is not None:
        (<Transmitter>p.nic).c_pause(t, (iarg >> 32) & 0xFF, quanta)
    return 0


cdef int _ev_pfc_refresh(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1:
    """Switch._pfc_refresh: XOFF again for the priorities still paused (iarg: port | vector << 32)."""
    cdef SwitchBase sw = <SwitchBase>obj
    cdef int port = iarg & 0xFFFFFFFF
    cdef int vector = (iarg >> 32) & 0xFF
    cdef int still = 0, q
    for q in range(NQ):
        if vector >> q & 1 and sw.mmu.occ[port * NQ + q].xo:
            still |= 1 << q
    if still:
        sw.c_send_pfc(t, port, still, True)
    return 0


cdef class SwitchBase:
    """The compiled forwarding path of emu.dataplane.pipeline.Switch (emu.dataplane.native.NativeSwitch
    subclasses both: the reference builds it and runs its slow path). Frames are C buffers here; a
    frame the reference's code must see (ARP, NDP, ICMP, probes, SRv6 segments and policies, TTL
    expiry) goes to it as bytes, where the reference would have taken the same branch."""

    cpdef int compile(self) except -1:
        """Mirror the state the reference's __init__ and load_tables set into C, for the hot path."""
        import random

        cdef int i
        self.sched = <Schedule?>self.loop.sched
        self.nports = len(self.ports)
        for i in range(64):
            self.c_dscp_tc[i] = self.dscp_tc[i]
            self.c_trimmable[i] = self.trimmable[i]
        for i in range(NQ):
            self.c_lossless[i] = self.lossless[i]
            e = self.ecn[i]
            self.ecn_on[i] = e is not None
            if e is not None:
                self.kmin[i], self.kmax[i], self.pmax[i] = e
        self.c_pfc = self.pfc
        self.c_cpu = self.cpu
        trim = self.trim
        self.trim_on = trim is not None
        if trim is not None:
            self.trim_size, self.trim_dscp, self.trim_queue, self.trim_cap = trim.size, trim.dscp, trim.queue, trim.cap_bytes
        if isinstance(self.rng, random.Random):  # the reference's stream, from where its __init__ left it
            mt_take(&self.c_rng, self.rng)
            self.rng = None
        self.c_hash_mult = self.hash_mult
        self.compile_tables()
        return 0

    cpdef int compile_tables(self) except -1:
        self.has_sids = len(self.sids) > 0
        self.sid_table = Table()
        cdef uint64_t hi, lo
        for sid in self.sids:
            _split(sid, &hi, &lo)
            self.sid_table.put(hi, lo, True)
        self.local4_table = Table()
        for a in self.local4:
            self.local4_table.put(0, a, True)
        self.local6_table = Table()
        for a in self.local6:
            _split(a, &hi, &lo)
            self.local6_table.put(hi, lo, True)
        self.c_has_encap = self.has_encap
        return 0

    # -- what Python calls ------------------------------------------------------------------------

    def wire_target(self, int port):
        return Target(self, port)

    def ingress(self, int port, t_, frame):
        cdef int64_t t = ps_of(t_)
        self.c_ingress(port, t, packet_from(frame))

    def from_host(self, int port, t_, frame):
        cdef int64_t t = ps_of(t_)
        self.c_from_host(port, t, packet_from(frame))

    def classify(self, frame):
        cdef bytes b = bytes(frame)
        return _traffic_class(self.c_dscp_tc, <const uint8_t*><char*>b, len(b))

    def _enqueue(self, t_, int out_port, int tc, frame, int in_port, int l3=0, int ipv=0):
        cdef int64_t t = ps_of(t_)
        self.c_enqueue(t, out_port, tc, packet_from(frame), in_port, l3, ipv)

    def send_pfc(self, t_, int port, dict times):
        cdef int64_t t = ps_of(t_)
        values = set(times.values())
        if len(values) != 1 or not values <= {0, PFC_XOFF}:
            raise ValueError("the compiled core sends XOFF or XON frames for one or more priorities")
        cdef int vector = 0
        for tc in times:
            vector |= 1 << tc
        self.c_send_pfc(t, port, vector, bool(values.pop()))

    # -- the hot path -------------------------------------------------------------------------------

    cdef int c_from_host(self, int port, int64_t t, Packet* pkt) except -1:
        return self.c_host_frame(<Port>self.ports[port], t, pkt)

    cdef int c_host_frame(self, Port p, int64_t t, Packet* pkt) except -1:
        """A host's frame into port p's NIC model (c_from_host, the port already in hand)."""
        if p.nic is None or not p.up:
            packet_free(pkt)
            p.c_drop("link_down", -1)
            return 0
        cdef int tc = _traffic_class(self.c_dscp_tc, pkt.data, pkt.len)
        if not (<Transmitter>p.nic).c_enqueue(t, tc, pkt, NO_META):
            p.c_drop("host_nic_overflow", tc)
        return 0

    cdef int _slow(self, str method, Port p, int64_t t, Packet* pkt, int l3, int depth) except -1:
        """The reference's own code for a branch this path does not take (it redoes its checks first)."""
        frame = packet_bytes(pkt)
        packet_free(pkt)
        if method == "_ipv6":
            getattr(self, method)(p, t, frame, l3, depth)
        else:
            getattr(self, method)(p, t, frame, l3)
        return 0

    cdef int c_ingress(self, int port, int64_t t, Packet* pkt) except -1:
        cdef Port p = <Port>self.ports[port]
        cdef const uint8_t* f = pkt.data
        cdef int n = pkt.len
        p.rx_packets += 1
        p.rx_bytes += n
        if not p.up:
            packet_free(pkt)
            p.c_drop("link_down", -1)
            return 0
        if n < 14:
            packet_free(pkt)
            p.c_drop("malformed", -1)
            return 0
        cdef int et = f[12] << 8 | f[13]
        cdef int l3 = 14
        if et == ETH_VLAN:
            if n < 18:
                packet_free(pkt)
                p.c_drop("malformed", -1)
                return 0
            et = f[16] << 8 | f[17]
            l3 = 18
        if et == ETH_PROBE:
            return self._slow("_probe", p, t, pkt, l3, 0)
        cdef uint16_t quanta[8]
        cdef int vector, q
        if et == ETH_MAC_CONTROL:
            if n < l3 + 20 or (f[l3] << 8 | f[l3 + 1]) != 0x0101:
                packet_free(pkt)
                p.c_drop("malformed", -1)
                return 0
            vector = f[l3 + 3]
            for q in range(NQ):
                quanta[q] = f[l3 + 4 + 2 * q] << 8 | f[l3 + 5 + 2 * q]
            packet_free(pkt)
            p.pfc_rx += 1
            p.tx.c_pause(t, vector, quanta)
            return 0
        cdef int i
        cdef bint mine = True
        for i in range(6):
            if f[i] != p.cmac[i]:
                mine = False
                break
        if not mine and not f[0] & 1:
            packet_free(pkt)
            p.c_drop("not_for_us", -1)
            return 0
        if et == ETH_IPV4:
            return self.c_ipv4(p, t, pkt, l3)
        if et == ETH_IPV6:
            return self.c_ipv6(p, t, pkt, l3)
        if et == ETH_ARP:
            return self._slow("_arp", p, t, pkt, l3, 0)
        packet_free(pkt)
        p.c_drop("unknown_ethertype", -1)
        return 0

    cdef uint32_t flow_hash(self, const uint8_t* f, int src_off, int l4, int proto, int src_len) noexcept:
        """Switch._flow_hash: CRC-32 of the 5-tuple, then the switch's odd multiplier."""
        cdef uint32_t h = crc32(f + src_off, src_len, proto)
        if proto == 17 or proto == 6:
            h = crc32(f + l4, 4, h)
        return <uint32_t>(((<uint64_t>h * self.c_hash_mult) & 0xFFFFFFFFULL) >> 8)

    cdef int c_ipv4(self, Port p, int64_t t, Packet* pkt, int l3) except -1:
        cdef uint8_t* f = pkt.data
        cdef int n = pkt.len
        if n < l3 + 20:
            packet_free(pkt)
            p.c_drop("malformed", -1)
            return 0
        cdef int vihl = f[l3]
        cdef int ihl = (vihl & 0x0F) * 4
        cdef int tot = f[l3 + 2] << 8 | f[l3 + 3]
        if vihl >> 4 != 4 or ihl < 20 or tot < ihl or n < l3 + tot:
            packet_free(pkt)
            p.c_drop("malformed", -1)
            return 0
        cdef uint64_t dst = <uint64_t>f[l3 + 16] << 24 | f[l3 + 17] << 16 | f[l3 + 18] << 8 | f[l3 + 19]
        cdef int ttl = f[l3 + 8]
        if self.local4_table.get(0, dst) != NULL or ttl <= 1:
            return self._slow("_ipv4", p, t, pkt, l3, 0)
        cdef PyObject* v = self.lpm4.c_lookup(0, dst)
        if v == NULL:
            packet_free(pkt)
            p.c_drop("no_route", -1)
            return 0
        cdef GroupState g = <GroupState>v
        cdef int slot
        if g.nslots == 1:
            slot = 0
        else:
            slot = g.c_pick(0 if g.spray else self.flow_hash(f, l3 + 12, l3 + ihl, f[l3 + 9], 8))
        if slot < 0:
            packet_free(pkt)
            p.c_drop("no_live_nexthop", -1)
            return 0
        if n != l3 + tot:
            pkt.len = l3 + tot
        cdef Slot* s = &g.slot[slot]
        memcpy(f, s.l2, 12)
        f[l3 + 8] = ttl - 1
        cdef int c = (f[l3 + 10] << 8 | f[l3 + 11]) + 0x100
        c = (c & 0xFFFF) + (c >> 16)
        f[l3 + 10] = c >> 8
        f[l3 + 11] = c & 0xFF
        return self.c_enqueue(t, s.port, self.c_dscp_tc[f[l3 + 1] >> 2], pkt, p.index, l3, 4)

    cdef int c_ipv6(self, Port p, int64_t t, Packet* pkt, int l3) except -1:
        cdef uint8_t* f = pkt.data
        cdef int n = pkt.len
        if n < l3 + 40 or f[l3] >> 4 != 6:
            packet_free(pkt)
            p.c_drop("malformed", -1)
            return 0
        cdef int plen = f[l3 + 4] << 8 | f[l3 + 5]
        if n < l3 + 40 + plen:
            packet_free(pkt)
            p.c_drop("malformed", -1)
            return 0
        cdef uint64_t hi = _be64(f + l3 + 24)
        cdef uint64_t lo = _be64(f + l3 + 32)
        if (self.has_sids and self.sid_table.get(hi, lo) != NULL) or self.local6_table.get(hi, lo) != NULL \
                or (hi == SOLICITED_HI and lo >> 24 == SOLICITED_LO24):
            return self._slow("_ipv6", p, t, pkt, l3, 0)
        if f[0] & 1:
            packet_free(pkt)
            p.c_drop("multicast", -1)
            return 0
        if f[l3 + 7] <= 1 or (self.c_has_encap and self.encap.c_lookup(hi, lo) != NULL):
            return self._slow("_ipv6", p, t, pkt, l3, 0)
        if n != l3 + 40 + plen:
            pkt.len = l3 + 40 + plen
        cdef PyObject* v = self.lpm6.c_lookup(hi, lo)
        if v == NULL:
            packet_free(pkt)
            p.c_drop("no_route", -1)
            return 0
        cdef GroupState g = <GroupState>v
        cdef int slot
        if g.nslots == 1:
            slot = 0
        else:
            slot = g.c_pick(0 if g.spray else self.flow_hash(f, l3 + 8, l3 + 40, f[l3 + 6], 32))
        if slot < 0:
            packet_free(pkt)
            p.c_drop("no_live_nexthop", -1)
            return 0
        cdef Slot* s = &g.slot[slot]
        memcpy(f, s.l2, 12)
        f[l3 + 7] -= 1
        cdef int tc = self.c_dscp_tc[((f[l3] & 0x0F) << 2) | (f[l3 + 1] >> 6)]
        return self.c_enqueue(t, s.port, tc, pkt, p.index, l3, 6)

    # -- the traffic manager --------------------------------------------------------------------------

    cdef int c_enqueue(self, int64_t t, int out_port, int tc, Packet* pkt, int in_port, int l3, int ipv) except -1:
        cdef Port port = <Port>self.ports[out_port]
        cdef int n = pkt.len
        cdef bint lossless = self.c_pfc and self.c_lossless[tc]
        cdef SharedBuffer mmu = self.mmu
        cdef int reason = mmu.admit(in_port, tc, out_port, n, lossless)
        cdef uint8_t* f = pkt.data
        cdef int64_t q, kmin, kmax
        if reason != ADMIT:
            if self.trim_on and ipv and n > l3 + self.trim_size and self.c_trimmable[self._dscp(f, l3, ipv)]:
                return self._trim(t, port, tc, pkt, l3, ipv)
            packet_free(pkt)
            port.c_drop(REASONS[reason], tc)
            return 0
        if self.ecn_on[tc] and ipv:
            q = port.tx.qs[tc].qb
            kmin = self.kmin[tc]
            kmax = self.kmax[tc]
            port.c_q_enq[tc] += 1
            if q >= kmax:
                port.c_over_kmax[tc] += 1
            if q > kmin and (q >= kmax or mt_random(&self.c_rng) < self.pmax[tc] * <double>(q - kmin) / <double>(kmax - kmin)):
                if self._mark_ce(f, l3, ipv):
                    port.ecn_marked += 1
        mmu.charge(in_port, tc, out_port, n, lossless)
        if lossless and in_port != self.c_cpu and mmu.should_pause(in_port, tc):
            mmu.occ[in_port * NQ + tc].xo = 1
            self.c_send_pfc(t, in_port, 1 << tc, True)
        port.tx.c_enqueue(t, tc, pkt, in_port)
        return 0

    cdef inline int _dscp(self, const uint8_t* f, int l3, int ipv) noexcept:
        if ipv == 4:
            return f[l3 + 1] >> 2
        return (f[l3] & 0x0F) << 2 | f[l3 + 1] >> 6

    cdef int _trim(self, int64_t t, Port port, int tc, Packet* pkt, int l3, int ipv) except -1:
        """Switch._trim: cut instead of dropping (packet.trim_frame makes the cut frame)."""
        from emu import packet as pk

        if port.tx.qs[self.trim_queue].qb + l3 + self.trim_size > self.trim_cap:
            packet_free(pkt)
            port.c_drop("trim_queue_full", tc)
            return 0
        port.c_trimmed[tc] += 1
        frame = packet_bytes(pkt)
        packet_free(pkt)
        cut = pk.trim_frame(frame, l3, ipv, self.trim_size, self.trim_dscp)
        port.tx.c_enqueue(t, self.trim_queue, packet_from(cut), TRIMMED)
        return 0

    cdef bint _mark_ce(self, uint8_t* f, int l3, int ipv) noexcept:
        cdef int tos, old, s, hc, b
        if ipv == 4:
            tos = f[l3 + 1]
            if (tos & 3) != 1 and (tos & 3) != 2:
                return False
            old = f[l3] << 8 | tos
            f[l3 + 1] = tos | 3
            hc = f[l3 + 10] << 8 | f[l3 + 11]
            # RFC 1624, as Switch._csum_replace
            s = (~hc & 0xFFFF) + (~old & 0xFFFF) + (old | 3)
            s = (s & 0xFFFF) + (s >> 16)
            s = (s & 0xFFFF) + (s >> 16)
            s = ~s & 0xFFFF
            f[l3 + 10] = s >> 8
            f[l3 + 11] = s & 0xFF
            return True
        b = f[l3 + 1]
        if ((b >> 4) & 3) != 1 and ((b >> 4) & 3) != 2:
            return False
        f[l3 + 1] = b | 0x30
        return True

    cdef int c_dequeued(self, int out_port, int64_t t, int tc, Packet* pkt, int64_t in_port) except -1:
        if in_port == TRIMMED:
            return 0
        cdef SharedBuffer mmu = self.mmu
        mmu.release(<int>in_port, tc, out_port, pkt.len)
        if mmu.occ[in_port * NQ + tc].xo and mmu.should_resume(<int>in_port, tc):
            mmu.occ[in_port * NQ + tc].xo = 0
            self.c_send_pfc(t, <int>in_port, 1 << tc, False)
        return 0

    cdef int c_send_pfc(self, int64_t t, int port, int vector, bint xoff) except -1:
        """Switch.send_pfc: a real 802.1Qbb frame to the peer, ahead of the data queues."""
        cdef Port p = <Port>self.ports[port]
        p.pfc_tx += 1
        cdef Packet* pkt = packet_new(60)
        if pkt == NULL:
            raise MemoryError()
        cdef uint8_t* f = pkt.data
        cdef int q
        cdef uint16_t value = PFC_XOFF if xoff else 0
        for q in range(60):
            f[q] = 0
        f[0], f[1], f[2], f[3], f[4], f[5] = 0x01, 0x80, 0xC2, 0x00, 0x00, 0x01
        memcpy(f + 6, p.cmac, 6)
        f[12], f[13], f[14], f[15] = 0x88, 0x08, 0x01, 0x01
        f[17] = vector
        for q in range(NQ):
            if vector >> q & 1:
                f[18 + 2 * q] = value >> 8
                f[19 + 2 * q] = value & 0xFF
        cdef Transmitter tx = p.tx
        cdef int64_t arrive = t + (c_ser_ps(84, tx.rate_bps) if tx.rate_bps else 0) + p.delay_ps
        deliver_at(self.sched, tx.dv, arrive, pkt)
        if p.nic is not None:
            self.sched.push(arrive, _ev_host_paused, self, None, NULL,
                            port | (<int64_t>vector << 32) | (<int64_t>xoff << 40))
        if xoff:
            self.sched.push(t + c_pause_ps(PFC_XOFF, p.rate_bps) // 2, _ev_pfc_refresh, self, None, NULL,
                            port | (<int64_t>vector << 32))
        return 0
