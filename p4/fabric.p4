/*
 * fabric.p4: the emulator's switch for BMv2 simple_switch (v1model, P4_16).
 *
 * The same table entries drive this program and the native engine
 * (emu/control/model.py); emu/backends/bmv2/cli.py turns them into
 * simple_switch_CLI commands. Tables:
 *
 *   dscp_to_priority  exact meta.dscp       -> set_priority(prio)      (queue, with --priority-queues 8)
 *   ipv4_lpm          lpm ipv4.dst          -> set_group(gid, members, spray) | drop
 *   ipv6_lpm          lpm ipv6.dst          -> set_group(gid, members, spray) | drop
 *   nexthop_member    exact (gid, member)   -> set_nexthop(port, dmac, smac)
 *   my_sid            lpm ipv6.dst          -> srv6_end | srv6_end_x(gid, members) | srv6_end_dt6
 *   srv6_encap        lpm ipv6.dst          -> h_encaps_1(src, s1) | h_encaps_2(src, s1, s2) | h_encaps_3(...)
 *   ecn_red           exact egress_port     -> set_ecn_red(kmin, kmax, step)   RED on enq_qdepth (packets)
 *   pfc_threshold     exact (port, prio)    -> set_pfc(xoff, xon, refresh)     lossless priorities only
 *   trim_cfg          exact egress_port     -> set_trim(qdepth, dscp)          trimming (see below)
 *
 * A group is a slot table: `size` members, 0..size-1; weights are repeated
 * members (as the engine's slot tables). The member is a CRC-16 of the
 * 5-tuple modulo size (ECMP), or a random one per packet (spraying).
 *
 * PFC, split as in a real switch between the pipeline and the MAC
 * (docs/p4.md): BMv2 cannot pause one of its own queues, so this program
 * accounts buffer per (ingress port, priority) in registers and sends
 * 802.1Qbb XOFF out of the ingress port when a lossless priority passes
 * its XOFF threshold, XON when it falls to XON; the MAC beside each port
 * (the engine's wire box) honours pauses it receives by holding that
 * priority. A frame stays charged until the MAC has put it on the wire:
 * egress tags it with its ingress port and priority (in the source MAC,
 * which the MAC restores), and the MAC returns the bytes in credit frames
 * (EtherType 0x88b5) once they left, so frames held by a pause still
 * count against this switch's XOFF, and back-pressure goes hop by hop.
 *
 * Trimming (--trim): BMv2 drops in its traffic manager, before egress, and
 * egress only sees the depth a packet found when it was queued. So a RoCE
 * write of the trimmable DSCP (24) that found its queue at `qdepth` packets
 * or more is cut at egress to 64 bytes after Ethernet (IPv6, UDP, the BTH
 * and the first 4 bytes of the RETH: the headers this program parses, so its
 * UDP checksum can be computed over exactly what is left), its lengths set
 * and its DSCP rewritten. It leaves from the queue it was in: unlike the
 * engine's, a cut here does not jump ahead of the data (docs/p4.md).
 */

#include <core.p4>
#include <v1model.p4>
#include <ecn_decide.p4>  // angle brackets: found by -I, so a lab can give its own

#define MAX_SEGS 4

const bit<16> ETH_IPV4 = 0x0800;
const bit<16> ETH_IPV6 = 0x86dd;
const bit<16> ETH_VLAN = 0x8100;
const bit<16> ETH_PFC  = 0x8808;
const bit<16> ETH_CREDIT = 0x88b5;  // IEEE 802 local experimental: the MAC's buffer credits
const bit<16> PFC_OPCODE = 0x0101;
const bit<48> PFC_DST = 0x0180c2000001;
const bit<8>  PROTO_UDP = 17;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_ROUTING = 43;
const bit<8>  PROTO_IPV6 = 41;
const bit<16> ROCE_PORT = 4791;
const bit<6>  DSCP_TRIMMABLE = 24;  // MetaRoCE's data in trimming mode
const bit<8>  BTH_WRITE_ONLY = 0x0a;
const bit<8>  BTH_WRITE_ONLY_IMM = 0x0b;
const bit<16> TRIM_KEEP = 64;  // bytes after Ethernet: IPv6 40, UDP 8, BTH 12, the RETH's first 4

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header vlan_t { bit<3> pcp; bit<1> dei; bit<12> vid; bit<16> ether_type; }
header pfc_t { bit<16> opcode; bit<16> class_enable; bit<128> pause_times; }
// Bytes of (ingress port, priority) that left this switch's MAC: the charge to release.
header credit_t { bit<16> port; bit<8> prio; bit<32> bytes; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<6> dscp; bit<2> ecn; bit<16> total_len;
    bit<16> identification; bit<3> flags; bit<13> frag_offset; bit<8> ttl;
    bit<8> protocol; bit<16> checksum; bit<32> src; bit<32> dst;
}
header ipv6_t {
    bit<4> version; bit<6> dscp; bit<2> ecn; bit<20> flow_label; bit<16> payload_len;
    bit<8> next_hdr; bit<8> hop_limit; bit<128> src; bit<128> dst;
}
header srh_t {
    bit<8> next_hdr; bit<8> hdr_ext_len; bit<8> routing_type; bit<8> segments_left;
    bit<8> last_entry; bit<8> flags; bit<16> tag;
}
header srh_segment_t { bit<128> sid; }
header l4_ports_t { bit<16> src_port; bit<16> dst_port; }
header udp_rest_t { bit<16> len; bit<16> checksum; }
header bth_t { bit<8> opcode; bit<8> flags; bit<16> pkey; bit<8> resv; bit<24> dest_qp; bit<8> ack; bit<24> psn; }
header reth_head_t { bit<32> va_hi; }  // a write's RETH, its first 4 bytes: what a 64-byte cut keeps of it

struct headers_t {
    ethernet_t ethernet;
    vlan_t vlan;
    pfc_t pfc;
    credit_t credit;
    ipv4_t ipv4;
    ipv6_t ipv6;
    srh_t srh;
    srh_segment_t[MAX_SEGS] segs;
    ipv6_t inner_ipv6;
    l4_ports_t ports;
    udp_rest_t udp;
    bth_t bth;
    reth_head_t reth_head;
}

struct metadata_t {
    bit<16> gid;
    bit<16> group_size;
    bit<1>  spray;
    bit<16> member;
    bit<1>  routed;
    bit<8>  segs_to_parse;
    bit<8>  seg_index;
    bit<128> next_sid;
    bit<8>  l4_proto;
    bit<32> ecn_kmin;
    bit<32> ecn_kmax;
    bit<32> ecn_step;
    bit<6>  dscp;
    // PFC accounting: the (port, priority) charged, whether egress tags the frame for its credit,
    // and what a cloned pause frame carries to egress.
    bit<9>  acct_port;
    bit<3>  acct_prio;
    bit<1>  charged;
    bit<32> acct_add;
    bit<32> acct_sub;
    bit<32> pfc_xoff;
    bit<32> pfc_xon;
    bit<48> pfc_refresh;
    bit<32> trim_qdepth;
    bit<6>  trim_dscp;
    bit<1>  trimmed;
    @field_list(1) bit<3>  pause_prio;
    @field_list(1) bit<16> pause_quanta;
}

parser FabricParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t std) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETH_VLAN: parse_vlan;
            ETH_IPV4: parse_ipv4;
            ETH_IPV6: parse_ipv6;
            ETH_PFC: parse_pfc;
            ETH_CREDIT: parse_credit;
            default: accept;
        }
    }
    state parse_credit { pkt.extract(hdr.credit); transition accept; }
    state parse_vlan {
        pkt.extract(hdr.vlan);
        transition select(hdr.vlan.ether_type) {
            ETH_IPV4: parse_ipv4;
            ETH_IPV6: parse_ipv6;
            default: accept;
        }
    }
    state parse_pfc { pkt.extract(hdr.pfc); transition accept; }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        meta.l4_proto = hdr.ipv4.protocol;
        meta.dscp = hdr.ipv4.dscp;
        transition select(hdr.ipv4.protocol) {
            PROTO_UDP: parse_udp;
            PROTO_TCP: parse_ports;
            default: accept;
        }
    }
    state parse_ipv6 {
        pkt.extract(hdr.ipv6);
        meta.l4_proto = hdr.ipv6.next_hdr;
        meta.dscp = hdr.ipv6.dscp;
        transition select(hdr.ipv6.next_hdr) {
            PROTO_ROUTING: parse_srh;
            PROTO_IPV6: parse_inner_ipv6;
            PROTO_UDP: parse_udp;
            PROTO_TCP: parse_ports;
            default: accept;
        }
    }
    state parse_srh {
        pkt.extract(hdr.srh);
        meta.segs_to_parse = hdr.srh.last_entry + 1;
        meta.seg_index = 0;
        transition select(hdr.srh.last_entry) {
            0: parse_segment;
            1: parse_segment;
            2: parse_segment;
            3: parse_segment;
            default: reject;  // more segments than this build carries (MAX_SEGS)
        }
    }
    state parse_segment {
        pkt.extract(hdr.segs.next);
        // The SID at index segments_left - 1 becomes the destination after End (RFC 8986).
        transition select(hdr.srh.segments_left - meta.seg_index) {
            1: remember_next_sid;
            default: next_segment;
        }
    }
    state remember_next_sid {
        meta.next_sid = hdr.segs.last.sid;
        transition next_segment;
    }
    state next_segment {
        meta.seg_index = meta.seg_index + 1;
        meta.segs_to_parse = meta.segs_to_parse - 1;
        transition select(meta.segs_to_parse) {
            0: after_srh;
            default: parse_segment;
        }
    }
    state after_srh {
        transition select(hdr.srh.next_hdr) {
            PROTO_IPV6: parse_inner_ipv6;
            default: accept;
        }
    }
    state parse_inner_ipv6 { pkt.extract(hdr.inner_ipv6); transition accept; }
    state parse_ports { pkt.extract(hdr.ports); transition accept; }
    state parse_udp {
        pkt.extract(hdr.ports);
        pkt.extract(hdr.udp);
        transition select(hdr.ports.dst_port) {
            ROCE_PORT: parse_bth;
            default: accept;
        }
    }
    state parse_bth {
        pkt.extract(hdr.bth);
        transition select(hdr.bth.opcode) {
            BTH_WRITE_ONLY: parse_reth_head;
            BTH_WRITE_ONLY_IMM: parse_reth_head;
            default: accept;
        }
    }
    state parse_reth_head { pkt.extract(hdr.reth_head); transition accept; }
}

control FabricVerifyChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }

control FabricIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    counter(512, CounterType.packets_and_bytes) rx_port;
    counter(512, CounterType.packets) pfc_rx;
    counter(512, CounterType.packets) pfc_xoff_sent;  // by the port the pause went out of
    counter(512, CounterType.packets) pfc_xon_sent;
    // Index port * 8 + priority: bytes charged, XOFF in force, when the last XOFF went (us).
    register<bit<32>>(4096) pfc_used;
    register<bit<1>>(4096) pfc_paused;
    register<bit<48>>(4096) pfc_last;
    // This switch's odd hash multiplier, written at start (the native engine does the same). Every
    // switch hashing the same 5-tuple with the same CRC picks correlated slots: the flows one switch
    // sends to a neighbour all land on the same few slots there (ECMP polarisation), and WCMP after
    // a failure sent nothing over one of the surviving links.
    register<bit<32>>(1) hash_mult;

    action set_pfc(bit<32> xoff, bit<32> xon, bit<48> refresh) {
        meta.pfc_xoff = xoff;
        meta.pfc_xon = xon;
        meta.pfc_refresh = refresh;
    }
    table pfc_threshold {
        key = { meta.acct_port: exact; meta.acct_prio: exact; }
        actions = { set_pfc; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    // A pause frame for meta.acct_prio out of meta.acct_port: a clone of this packet, rewritten in egress.
    action send_pause(bit<16> quanta) {
        meta.pause_prio = meta.acct_prio;
        meta.pause_quanta = quanta;
        clone_preserving_field_list(CloneType.I2E, (bit<32>)meta.acct_port, 1);
    }


    // Every packet the pipeline drops on purpose, by ingress port: the rest of what came in and did
    // not go out (less the pause frames cloned) is what simple_switch's queues dropped.
    counter(512, CounterType.packets) dropped;
    action drop() {
        mark_to_drop(std);
        dropped.count((bit<32>)std.ingress_port);
    }

    action set_priority(bit<3> prio) { std.priority = prio; }
    table dscp_to_priority {
        key = { meta.dscp: exact; }
        actions = { set_priority; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    action set_group(bit<16> gid, bit<16> members, bit<1> spray) {
        meta.gid = gid;
        meta.group_size = members;
        meta.spray = spray;
        meta.routed = 1;
    }
    table ipv4_lpm {
        key = { hdr.ipv4.dst: lpm; }
        actions = { set_group; drop; }
        default_action = drop();
        size = 4096;
    }
    table ipv6_lpm {
        key = { hdr.ipv6.dst: lpm; }
        actions = { set_group; drop; }
        default_action = drop();
        size = 4096;
    }

    action set_nexthop(bit<9> port, bit<48> dmac, bit<48> smac) {
        std.egress_spec = port;
        hdr.ethernet.dst = dmac;
        hdr.ethernet.src = smac;
    }
    table nexthop_member {
        key = { meta.gid: exact; meta.member: exact; }
        actions = { set_nexthop; drop; }
        default_action = drop();
        size = 16384;
    }

    // SRv6 local SIDs (RFC 8986).
    action srv6_end() {
        hdr.srh.segments_left = hdr.srh.segments_left - 1;
        hdr.ipv6.dst = meta.next_sid;
    }
    action srv6_end_x(bit<16> gid, bit<16> members) {
        srv6_end();
        set_group(gid, members, 1w0);
    }
    action srv6_end_dt6() {
        // Remove the outer IPv6 header and the SRH; the inner packet is routed by ipv6_lpm.
        hdr.ipv6 = hdr.inner_ipv6;
        hdr.inner_ipv6.setInvalid();
        hdr.srh.setInvalid();
        hdr.segs[0].setInvalid();
        hdr.segs[1].setInvalid();
        hdr.segs[2].setInvalid();
        hdr.segs[3].setInvalid();
    }
    table my_sid {
        key = { hdr.ipv6.dst: lpm; }
        actions = { srv6_end; srv6_end_x; srv6_end_dt6; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    // H.Encaps: a new outer IPv6 header and an SRH; DA = the first segment.
    action encap_common(bit<128> src, bit<8> n) {
        hdr.inner_ipv6 = hdr.ipv6;
        hdr.ipv6.next_hdr = PROTO_ROUTING;
        hdr.ipv6.hop_limit = 64;
        hdr.ipv6.src = src;
        hdr.ipv6.payload_len = hdr.inner_ipv6.payload_len + 40 + 8 + (bit<16>)n * 16;
        hdr.srh.setValid();
        hdr.srh.next_hdr = PROTO_IPV6;
        hdr.srh.hdr_ext_len = n * 2;
        hdr.srh.routing_type = 4;
        hdr.srh.segments_left = n - 1;
        hdr.srh.last_entry = n - 1;
        hdr.srh.flags = 0;
        hdr.srh.tag = 0;
    }
    action h_encaps_1(bit<128> src, bit<128> s1) {
        encap_common(src, 1);
        hdr.segs[0].setValid(); hdr.segs[0].sid = s1;
        hdr.ipv6.dst = s1;
    }
    action h_encaps_2(bit<128> src, bit<128> s1, bit<128> s2) {
        encap_common(src, 2);
        hdr.segs[0].setValid(); hdr.segs[0].sid = s2;  // the list is stored last segment first
        hdr.segs[1].setValid(); hdr.segs[1].sid = s1;
        hdr.ipv6.dst = s1;
    }
    action h_encaps_3(bit<128> src, bit<128> s1, bit<128> s2, bit<128> s3) {
        encap_common(src, 3);
        hdr.segs[0].setValid(); hdr.segs[0].sid = s3;
        hdr.segs[1].setValid(); hdr.segs[1].sid = s2;
        hdr.segs[2].setValid(); hdr.segs[2].sid = s1;
        hdr.ipv6.dst = s1;
    }
    table srv6_encap {
        key = { hdr.ipv6.dst: lpm; }
        actions = { h_encaps_1; h_encaps_2; h_encaps_3; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    apply {
        rx_port.count((bit<32>)std.ingress_port);
        if (hdr.pfc.isValid()) {  // the MAC honours pauses; one that reaches the pipeline is only counted
            pfc_rx.count((bit<32>)std.ingress_port);
            drop();
            return;
        }
        if (hdr.credit.isValid()) {
            meta.acct_port = (bit<9>)hdr.credit.port;
            meta.acct_prio = (bit<3>)hdr.credit.prio;
            meta.acct_sub = hdr.credit.bytes;
            drop();
        } else {
            // Routing: classify, TTL, LPM, SRv6, next-hop choice; a drop returns here.
            dscp_to_priority.apply();
            if (hdr.ipv4.isValid()) {
                if (hdr.ipv4.ttl <= 1) { drop(); return; }
                hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
                ipv4_lpm.apply();
            } else if (hdr.ipv6.isValid()) {
                if (hdr.ipv6.hop_limit <= 1) { drop(); return; }
                switch (my_sid.apply().action_run) {
                    srv6_end_x: { }
                    default: {
                        if (!hdr.srh.isValid()) { srv6_encap.apply(); }
                        ipv6_lpm.apply();
                    }
                }
                hdr.ipv6.hop_limit = hdr.ipv6.hop_limit - 1;
            }
            if (meta.routed == 1) {
                if (meta.spray == 1) {
                    // BMv2 has no HashAlgorithm.random: v1model's random() is the per-packet choice.
                    random(meta.member, 16w0, meta.group_size - 1);
                } else {
                    bit<32> flow;
                    bit<32> mult;
                    if (hdr.ipv4.isValid()) {
                        hash(flow, HashAlgorithm.crc32, 32w0,
                             { hdr.ipv4.src, hdr.ipv4.dst, meta.l4_proto, hdr.ports.src_port, hdr.ports.dst_port },
                             32w0xFFFFFFFF);
                    } else {
                        hash(flow, HashAlgorithm.crc32, 32w0,
                             { hdr.ipv6.src, hdr.ipv6.dst, meta.l4_proto, hdr.ports.src_port, hdr.ports.dst_port },
                             32w0xFFFFFFFF);
                    }
                    hash_mult.read(mult, 0);
                    flow = flow * (mult | 1);  // the high bits mix every input bit, per switch
                    hash(meta.member, HashAlgorithm.identity, 16w0, { flow[31:16] }, meta.group_size);
                }
                nexthop_member.apply();
            }
            if (meta.routed == 0) { drop(); return; }  // not IP, or no route: nothing goes to port 0
            if (std.egress_spec == 511) { return; }
            meta.acct_port = std.ingress_port;
            meta.acct_prio = std.priority;
            meta.acct_add = std.packet_length;
        }
        // Charge or release bytes of (acct_port, acct_prio); XOFF past the threshold (again once
        // `refresh` has passed, before the peer's pause runs out), XON at or below xon.
        if (pfc_threshold.apply().hit) {
            if (meta.acct_add != 0) { meta.charged = 1; }
            bit<32> i = (bit<32>)meta.acct_port * 8 + (bit<32>)meta.acct_prio;
            bit<48> now = std.ingress_global_timestamp;
            @atomic {
                bit<32> used;
                bit<1> paused;
                bit<48> last;
                pfc_used.read(used, i);
                pfc_paused.read(paused, i);
                pfc_last.read(last, i);
                used = used + meta.acct_add;
                if (used > meta.acct_sub) { used = used - meta.acct_sub; } else { used = 0; }
                pfc_used.write(i, used);
                if (used > meta.pfc_xoff && (paused == 0 || now - last >= meta.pfc_refresh)) {
                    pfc_paused.write(i, 1);
                    pfc_last.write(i, now);
                    send_pause(16w0xffff);
                    pfc_xoff_sent.count((bit<32>)meta.acct_port);
                } else if (paused == 1 && used <= meta.pfc_xon) {
                    pfc_paused.write(i, 0);
                    send_pause(16w0);
                    pfc_xon_sent.count((bit<32>)meta.acct_port);
                }
            }
        }
    }
}

control FabricEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    EcnDecide() ecn_decide;  // ecn_decide.p4: whether a packet that found `depth` queued is marked
    counter(512, CounterType.packets_and_bytes) tx_port;
    counter(512, CounterType.packets) ecn_marked;
    // ECN-capable packets seen and marked, by the queue depth they found (packets, 63 = 63 or more):
    // the marking probability as a function of depth, read from outside.
    counter(64, CounterType.packets) ecn_depth_seen;
    counter(64, CounterType.packets) ecn_depth_marked;

    // This port's RED thresholds (packets) and slope (ecn_decide.p4 says how they are used).
    action set_ecn_red(bit<32> kmin, bit<32> kmax, bit<32> step) {
        meta.ecn_kmin = kmin;
        meta.ecn_kmax = kmax;
        meta.ecn_step = step;
    }
    table ecn_red {
        key = { std.egress_port: exact; }
        actions = { set_ecn_red; NoAction; }
        default_action = set_ecn_red(10, 10, 65536);
        size = 512;
    }

    counter(512, CounterType.packets) trimmed;
    // Trimming on this port: cut a trimmable write that found `qdepth` packets queued or more.
    action set_trim(bit<32> qdepth, bit<6> dscp) {
        meta.trim_qdepth = qdepth;
        meta.trim_dscp = dscp;
    }
    table trim_cfg {
        key = { std.egress_port: exact; }
        actions = { set_trim; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    apply {
        tx_port.count((bit<32>)std.egress_port);
        if (std.instance_type == 1) {
            // An ingress clone: the 802.1Qbb frame send_pause asked for, 60 bytes (64 with FCS).
            hdr.ethernet.dst = PFC_DST;
            hdr.ethernet.src = 0x020000000000 | (bit<48>)std.egress_port;
            hdr.ethernet.ether_type = ETH_PFC;
            hdr.pfc.setValid();
            hdr.pfc.opcode = PFC_OPCODE;
            hdr.pfc.class_enable = (bit<16>)1 << (bit<8>)meta.pause_prio;
            hdr.pfc.pause_times = (bit<128>)meta.pause_quanta << (bit<8>)(8w16 * (8w7 - (bit<8>)meta.pause_prio));
            hdr.vlan.setInvalid();
            hdr.credit.setInvalid();
            hdr.ipv4.setInvalid();
            hdr.ipv6.setInvalid();
            hdr.srh.setInvalid();
            hdr.segs[0].setInvalid();
            hdr.segs[1].setInvalid();
            hdr.segs[2].setInvalid();
            hdr.segs[3].setInvalid();
            hdr.inner_ipv6.setInvalid();
            hdr.ports.setInvalid();
            hdr.udp.setInvalid();
            hdr.bth.setInvalid();
            truncate(60);
            return;
        }
        if (meta.charged == 1) {
            // For the MAC: what to credit once this frame has left: the bytes charged, the ingress port
            // and the priority. A group bit in a source MAC marks it (no sender has one); the MAC puts
            // the port's own MAC back. Layout: 01 | bytes (16) | port (16) | priority (8).
            hdr.ethernet.src = 0x010000000000 | ((bit<48>)(bit<16>)meta.acct_add << 24)
                               | ((bit<48>)meta.acct_port << 8) | (bit<48>)meta.acct_prio;
        }
        bit<1> ect = 0;
        if (hdr.ipv4.isValid() && (hdr.ipv4.ecn == 1 || hdr.ipv4.ecn == 2)) { ect = 1; }
        if (hdr.ipv6.isValid() && (hdr.ipv6.ecn == 1 || hdr.ipv6.ecn == 2)) { ect = 1; }
        if (ect == 1) {
            ecn_red.apply();
            bit<32> depth = (bit<32>)std.enq_qdepth;
            bit<32> bucket = depth;
            if (depth > 63) { bucket = 63; }
            ecn_depth_seen.count(bucket);
            bit<1> mark = 0;
            ecn_decide.apply(depth, meta.ecn_kmin, meta.ecn_kmax, meta.ecn_step, mark);
            if (mark == 1) {
                if (hdr.ipv4.isValid()) { hdr.ipv4.ecn = 3; } else { hdr.ipv6.ecn = 3; }
                ecn_marked.count((bit<32>)std.egress_port);
                ecn_depth_marked.count(bucket);
            }
        }
        if (hdr.ipv6.isValid() && hdr.ipv6.dscp == DSCP_TRIMMABLE && hdr.reth_head.isValid()
                && !hdr.vlan.isValid() && !hdr.srh.isValid()) {
            if (trim_cfg.apply().hit) {
                if ((bit<32>)std.enq_qdepth >= meta.trim_qdepth) {
                    truncate(14 + (bit<32>)TRIM_KEEP);
                    hdr.ipv6.payload_len = TRIM_KEEP - 40;
                    hdr.udp.len = TRIM_KEEP - 40;
                    hdr.ipv6.dscp = meta.trim_dscp;
                    meta.trimmed = 1;
                    trimmed.count((bit<32>)std.egress_port);
                }
            }
        }
    }
}

control FabricComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst },
            hdr.ipv4.checksum, HashAlgorithm.csum16);
        // A cut write's UDP checksum, over the IPv6 pseudo-header and exactly the bytes the cut kept.
        update_checksum(meta.trimmed == 1,
            { hdr.ipv6.src, hdr.ipv6.dst, 16w0, hdr.udp.len, 24w0, PROTO_UDP,
              hdr.ports.src_port, hdr.ports.dst_port, hdr.udp.len,
              hdr.bth.opcode, hdr.bth.flags, hdr.bth.pkey, hdr.bth.resv, hdr.bth.dest_qp, hdr.bth.ack,
              hdr.bth.psn, hdr.reth_head.va_hi },
            hdr.udp.checksum, HashAlgorithm.csum16);
    }
}

control FabricDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.vlan);
        pkt.emit(hdr.pfc);
        pkt.emit(hdr.credit);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv6);
        pkt.emit(hdr.srh);
        pkt.emit(hdr.segs);
        pkt.emit(hdr.inner_ipv6);
        pkt.emit(hdr.ports);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.reth_head);
    }
}

V1Switch(FabricParser(), FabricVerifyChecksum(), FabricIngress(), FabricEgress(),
         FabricComputeChecksum(), FabricDeparser()) main;
