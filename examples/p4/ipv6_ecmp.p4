/* IPv6 forwarding with ECMP, for `emu up ... --backend bmv2 --p4 examples/p4/ipv6_ecmp.p4
 * --p4-tables examples/p4/ipv6_ecmp_tables.py`.
 *
 * A route (longest prefix of the destination) names a group of equal-cost next hops: its first
 * slot and its size. A hash of the flow (addresses, flow label, next header, L4 ports) picks one
 * slot; the slot gives the port and the MACs. Nothing else: no ARP/NDP (the hosts have static
 * neighbours), no IPv4, no PFC or ECN. Anything not routed is dropped.
 */
#include <core.p4>
#include <v1model.p4>

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header ipv6_t {
    bit<4>   version;
    bit<8>   traffic_class;
    bit<20>  flow_label;
    bit<16>  payload_len;
    bit<8>   next_hdr;
    bit<8>   hop_limit;
    bit<128> src;
    bit<128> dst;
}

header ports_t {  /* the first four bytes of TCP and UDP */
    bit<16> src;
    bit<16> dst;
}

struct headers_t {
    ethernet_t eth;
    ipv6_t     ipv6;
    ports_t    l4;
}

struct meta_t {
    bit<16> base;     /* the group's first slot */
    bit<16> size;     /* its number of slots */
    bit<16> slot;     /* the one this flow takes */
    bit<16> sport;
    bit<16> dport;
}

parser Parse(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.eth);
        transition select(h.eth.ether_type) {
            0x86dd: ipv6;
            default: accept;
        }
    }
    state ipv6 {
        pkt.extract(h.ipv6);
        transition select(h.ipv6.next_hdr) {
            6: l4;
            17: l4;
            default: accept;
        }
    }
    state l4 {
        pkt.extract(h.l4);
        m.sport = h.l4.src;
        m.dport = h.l4.dst;
        transition accept;
    }
}

control NoChecksum(inout headers_t h, inout meta_t m) {
    apply { }  /* IPv6 has no header checksum; TCP's and UDP's do not cover what we change */
}

control Route(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action drop() {
        mark_to_drop(sm);
    }
    action set_group(bit<16> base, bit<16> size) {
        m.base = base;
        m.size = size;
    }
    action set_next_hop(bit<9> port, bit<48> smac, bit<48> dmac) {
        sm.egress_spec = port;
        h.eth.src = smac;
        h.eth.dst = dmac;
        h.ipv6.hop_limit = h.ipv6.hop_limit - 1;
    }

    table routes {
        key = { h.ipv6.dst: lpm; }
        actions = { set_group; drop; }
        default_action = drop();
        size = 4096;
    }
    table slots {
        key = { m.slot: exact; }
        actions = { set_next_hop; drop; }
        default_action = drop();
        size = 4096;
    }

    apply {
        if (!h.ipv6.isValid() || h.ipv6.hop_limit <= 1) {
            drop();
            return;
        }
        if (routes.apply().hit) {
            hash(m.slot, HashAlgorithm.crc32, m.base,
                 { h.ipv6.src, h.ipv6.dst, h.ipv6.flow_label, h.ipv6.next_hdr, m.sport, m.dport },
                 (bit<32>) m.size);
            slots.apply();
        }
    }
}

control Nothing(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply { }
}

control Deparse(packet_out pkt, in headers_t h) {
    apply {
        pkt.emit(h.eth);
        pkt.emit(h.ipv6);
        pkt.emit(h.l4);
    }
}

V1Switch(Parse(), NoChecksum(), Route(), Nothing(), NoChecksum(), Deparse()) main;
