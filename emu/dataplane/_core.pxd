# The compiled core's declarations, for the modules that run on it (emu.roce._device).
# cython: language_level=3

from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

ctypedef int (*EventFn)(object obj, int64_t t, object parg, void* varg, int64_t iarg) except -1

cdef struct Event:      # 64 bytes: one cache line when the pool is aligned
    int64_t t
    uint64_t h          # the tie key (emu.dataplane.schedule): its scheduler's identity, which child of it
    uint32_t c
    int held            # a compiled event holding a reference to obj (push_held)
    EventFn fn          # NULL: a Python callback, obj(t, parg)
    PyObject* obj
    PyObject* parg
    void* varg
    int64_t iarg

cdef struct Packet:
    int len
    int cap
    uint8_t* data
    int64_t meta        # what the queue keeps beside the frame (the ingress port it was charged to)
    int flags           # PENDING: a RoCEv2 frame whose UDP checksum and ICRC are owed (built compiled)
    Packet* next        # the queue's link, or the pool's

cdef enum:
    PENDING = 1

cdef struct Flight:     # a frame in flight on a link: when it lands, its place in the order, where
    int64_t t
    uint64_t h
    uint32_t c
    int32_t port        # >= 0: target is a switch and this its port (no Target read a hop); -1: deliver_now
    Packet* p
    PyObject* target

cdef struct MT:
    uint32_t mt[624]
    int index

cdef int64_t c_to_ps(double seconds) except? -1
cdef double c_to_s(int64_t ps) noexcept nogil
cdef int64_t c_ser_ps(int64_t nbytes, int64_t rate_bps) except -1
cdef int64_t c_rate_of(double rate_bps) except -1
cdef int64_t c_pause_ps(int64_t quanta, int64_t rate_bps) except -1
cdef int64_t ps_of(object t) except? -1
cdef Packet* packet_new(int size) noexcept
cdef void packet_free(Packet* p) noexcept
cdef Packet* packet_from(object frame) except NULL
cdef bytes packet_bytes(Packet* p)
cdef void materialize(Packet* p) noexcept
cdef uint32_t crc32(const uint8_t* data, int n, uint32_t start) noexcept nogil
cdef int deliver_now(object target, int64_t t, Packet* p) except -1
cdef int deliver_at(Schedule sched, object target, int64_t t, Packet* p) except -1

cdef struct HeapKey:         # what a sift moves: an event's time, its tie key's high half, its slot in the pool
    int64_t t
    uint32_t hh         # the tie key's high 32 bits: the rest of the key read from the pool only when these tie
    int32_t slot

cdef class Transmitter


cdef class Schedule:
    cdef HeapKey* heap          # heap[1] starts a cache line, so a node's two children share one
    cdef void* heap_mem
    cdef Event* pool
    cdef int32_t* spare         # free slots of the pool
    cdef Py_ssize_t n, cap, used, nspare
    cdef uint64_t cur_h          # the scheduler at() makes children of, and how many it has made
    cdef uint32_t cur_n
    cdef uint64_t run_h          # the running event's own key
    cdef uint32_t run_c
    cdef int64_t top_t           # the greatest key run so far (a link's kept end of transmission has had its turn
    cdef uint64_t top_h          # once this passes its key: Transmitter._settle)
    cdef uint32_t top_c
    cdef public int64_t now
    cdef public int mode
    cdef public int busy
    cdef public bint windowed
    cdef public int64_t drain_until
    cdef public double idle_dilation
    cdef public int64_t anchor_f
    cdef public double anchor_w
    cdef public bint paced
    cdef int push(self, int64_t t, EventFn fn, object obj, object parg, void* varg, int64_t iarg) except -1
    cdef int push_key(self, int64_t t, uint64_t h, uint32_t c, EventFn fn, object obj, object parg, void* varg,
                      int64_t iarg, int held=*) except -1
    cdef int push_held(self, int64_t t, EventFn fn, object obj) except -1
    cdef int push_land(self, Transmitter tx, Flight* f) except -1
    cdef Event* _place(self, int64_t t, uint64_t h, uint32_t c) except NULL
    cdef int _grow(self) except -1
    cdef int64_t mapped_at(self, double wall) except? -1
    cdef int64_t cclock(self) except? -1
    cdef inline int64_t next_t(self) noexcept
    cdef inline void _pop(self, Event* out) noexcept
    cdef inline int _run(self, Event* e) except -1
    cdef inline void _take(self, Event* e) noexcept
    cdef inline void _ran_to(self, int64_t t) noexcept
    cdef inline bint own_time(self) noexcept
    cdef inline int _fire(self, bint keep) except -1

cdef class Target:
    cdef readonly SwitchBase sw
    cdef readonly int port

cdef class Sink:
    cdef int take(self, int64_t t, Packet* p) except -1

cdef class HostPort:
    cdef public object send, port, pcap, roce, udp
    cdef public int udp_port
    cdef int c_deliver(self, int64_t t, Packet* p) except -1

cdef class KernelPort:
    cdef object ring, view
    cdef uint8_t* base
    cdef int frame_size, frames, index, fd
    cdef SwitchBase sw
    cdef int port
    cdef bint from_host
    cdef public int64_t truncated
    cdef int c_send(self, Packet* p, object port) except -1

cdef class FromHost:
    cdef readonly SwitchBase sw
    cdef readonly int port

cdef struct TxQueue:     # one priority's queue: what a frame's enqueue, pick and send touch, 64 bytes together
    Packet* head
    Packet* tail
    int64_t qb
    int64_t pause_until
    int64_t deficit
    int64_t quantum
    int64_t hwm
    int64_t qtx

cdef class Transmitter:
    # What every frame reads comes first, then its priority's queue, then what statistics and PFC's
    # accounting read: a link is visited once a hop among thousands, so its state is a few cache lines.
    cdef Schedule sched
    cdef object dv              # where frames land (deliver); a flight holds it, or its switch, borrowed
    cdef SwitchBase dv_sw       # dv as a switch's port (a Target, read when deliver is set): what a flight holds
    cdef SwitchBase dq_sw       # on_dequeue as a switch's port (a Target): its buffer's release, no Python
    cdef int dv_port, dq_port
    cdef object dequeue
    cdef public int64_t rate_bps, delay_ps
    cdef bint busy              # read through _settle: an end of transmission kept out of the heap may have passed
    cdef public int mask
    cdef public bint up
    cdef int nstrict
    cdef int dwrr_mask
    cdef int rr
    cdef bint visiting
    cdef public int64_t limit_bytes
    cdef public double loss
    cdef MT* rng                # a degraded link's loss stream, made when degraded (2.5 KB)
    cdef Flight* fly
    cdef Py_ssize_t fly_cap, fly_head, nfly  # fly_cap: 0, then 16 doubled (a power of two: wraps by a mask)
    cdef public int64_t tx_packets, tx_bytes
    cdef int strict[8]
    cdef TxQueue qs[8]
    cdef int64_t wake_at
    cdef bint kept              # the end of the frame on the wire, kept out of the heap: nothing was queued behind it
    cdef uint32_t end_c
    cdef uint64_t end_h         # its key, taken when the frame was sent
    cdef int64_t end_t
    cdef public object loop
    cdef list retired           # where frames landed before deliver was set again: kept for their flights
    cdef public str name
    cdef int64_t pause_since[8]
    cdef int64_t paused_time[8]
    cdef public int64_t drops, lost
    cdef int64_t base_rate, base_delay
    cdef bint c_enqueue(self, int64_t t, int prio, Packet* p, int64_t meta) except -1
    cdef void _deliver_to(self, object value) noexcept
    cdef int _fly(self, int64_t arrive, Packet* p) except -1
    cdef int _grow_fly(self) except -1
    cdef int _land(self) except -1
    cdef int _pick(self, int64_t t) except? -2
    cdef int _start(self, int64_t t) except -1
    cdef int64_t _send(self, int64_t t, int q, Packet* p, int64_t meta) except? -2
    cdef int _arm_wake(self, int64_t t) except -1
    cdef inline void _settle(self, int64_t t) noexcept
    cdef int _wake(self, int64_t t) except -1
    cdef int c_pause(self, int64_t t, int vector, const uint16_t* quanta) except -1

cdef struct Occ:             # a (port, priority)'s occupancy: one entry a frame's ingress, one its egress
    int64_t ing                 # bytes charged to it as the ingress
    int64_t hdr                 # of those, in its headroom
    int64_t egr                 # bytes queued to it as the egress
    int32_t xo                  # paused (XOFF sent) and not yet resumed
    int32_t pad

cdef class SharedBuffer:
    cdef public int nports
    cdef public int64_t size, reserve
    cdef public int shift
    cdef public double egress_alpha
    cdef public int64_t resume_offset
    cdef int64_t* hroom
    cdef Occ* occ               # per (port, priority): port * NQ + priority
    cdef public int64_t shared_used, used, total_headroom, total_reserve
    cdef inline int64_t threshold(self) noexcept
    cdef inline int64_t _shared(self, int port, int q) noexcept
    cdef int admit(self, int inp, int q, int outp, int64_t size, bint lossless) noexcept
    cdef void charge(self, int inp, int q, int outp, int64_t size, bint lossless) noexcept
    cdef void release(self, int inp, int q, int outp, int64_t size) noexcept
    cdef bint should_pause(self, int port, int q) noexcept
    cdef bint should_resume(self, int port, int q) noexcept

cdef struct TEntry:          # a table's slot: a probe reads one line (two slots a line)
    uint64_t hi
    uint64_t lo
    PyObject* val               # NULL: empty
    uint64_t pad

cdef class Table:
    cdef Py_ssize_t cap, count
    cdef bint borrowed          # holds no reference: its values are held elsewhere as long as it is used
    cdef TEntry* e
    cdef PyObject* get(self, uint64_t hi, uint64_t lo) noexcept
    cdef int put(self, uint64_t hi, uint64_t lo, object value) except -1
    cdef int _grow(self) except -1

cdef class Lpm:
    cdef public int bits
    cdef dict by_len
    cdef int nlen
    cdef int shifts[129]
    cdef PyObject* tables[129]
    cdef PyObject* c_lookup(self, uint64_t hi, uint64_t lo) noexcept

cdef struct Slot:            # a group's next hop: the MACs to write and the port, one 16-byte entry (one line)
    uint8_t l2[12]
    int32_t port

cdef class GroupState:
    cdef public object ref
    cdef public int id
    cdef public bint spray
    cdef public int rr
    cdef int nslots
    cdef Slot* slot
    cdef int _copy(self) except -1
    cdef inline int c_pick(self, uint32_t flow_hash) noexcept

cdef class Port:
    # What every frame reads or counts first, next to the object's header (a frame's ingress reads index, up,
    # the MAC and the rx counters; its egress tx and a priority's enqueue count): at thousands of ports each line a
    # hop touches can miss, and an object is aligned to 16 bytes, so these span two or three lines.
    cdef public int index
    cdef public bint up
    cdef uint8_t cmac[6]        # a frame's destination MAC is checked against it: in the same lines
    cdef public Transmitter tx
    cdef public int64_t rx_packets, rx_bytes
    cdef public object nic
    cdef int64_t c_q_enq[8]
    cdef public str name
    cdef public bytes mac
    cdef public str peer_kind
    cdef public bytes peer_mac
    cdef public dict ip4, ip6
    cdef public dict drops
    cdef int64_t c_drops_tc[8]
    cdef int64_t c_over_kmax[8]
    cdef int64_t c_trimmed[8]
    cdef public int64_t ecn_marked, pfc_tx, pfc_rx
    cdef public int64_t rate_bps, delay_ps
    cdef int c_drop(self, str reason, int tc) except -1

cdef class SwitchBase:
    cdef public object loop
    cdef Schedule sched
    cdef public list ports
    cdef public SharedBuffer mmu
    cdef public Lpm lpm4, lpm6, encap
    cdef public dict sids, local4, local6
    cdef public bint has_encap
    cdef int nports
    cdef uint8_t c_dscp_tc[64]
    cdef bint c_trimmable[64]
    cdef bint c_lossless[8]
    cdef bint ecn_on[8]
    cdef int64_t kmin[8]
    cdef int64_t kmax[8]
    cdef double pmax[8]
    cdef bint c_pfc
    cdef int c_cpu
    cdef bint trim_on
    cdef int trim_size, trim_dscp, trim_queue
    cdef int64_t trim_cap
    cdef uint32_t c_hash_mult
    cdef bint has_sids, c_has_encap
    cdef Table sid_table, local4_table, local6_table
    cdef MT c_rng               # ECN marking's stream: last, so that what every frame reads stays together
    cpdef int compile(self) except -1
    cpdef int compile_tables(self) except -1
    cdef int c_from_host(self, int port, int64_t t, Packet* pkt) except -1
    cdef int c_host_frame(self, Port p, int64_t t, Packet* pkt) except -1
    cdef int _slow(self, str method, Port p, int64_t t, Packet* pkt, int l3, int depth) except -1
    cdef int c_ingress(self, int port, int64_t t, Packet* pkt) except -1
    cdef uint32_t flow_hash(self, const uint8_t* f, int src_off, int l4, int proto, int src_len) noexcept
    cdef int c_ipv4(self, Port p, int64_t t, Packet* pkt, int l3) except -1
    cdef int c_ipv6(self, Port p, int64_t t, Packet* pkt, int l3) except -1
    cdef int c_enqueue(self, int64_t t, int out_port, int tc, Packet* pkt, int in_port, int l3, int ipv) except -1
    cdef inline int _dscp(self, const uint8_t* f, int l3, int ipv) noexcept
    cdef int _trim(self, int64_t t, Port port, int tc, Packet* pkt, int l3, int ipv) except -1
    cdef bint _mark_ce(self, uint8_t* f, int l3, int ipv) noexcept
    cdef int c_dequeued(self, int out_port, int64_t t, int tc, Packet* pkt, int64_t in_port) except -1
    cdef int c_send_pfc(self, int64_t t, int port, int vector, bint xoff) except -1
