"""The backend-independent table entries as simple_switch_CLI commands for p4/fabric.p4.

Tables and actions are those of p4/fabric.p4. A next-hop group becomes a
slot table in `nexthop_member` (one slot per member with equal weights,
64 interleaved slots by weight otherwise), exactly as the native engine
builds its groups, so both backends split traffic the same way.
"""

from __future__ import annotations

import ipaddress
import random

from emu.control.model import Group, SwitchTables
from emu.dataplane.pipeline import WireBox
from emu.dataplane.tables import smooth_wrr
from emu.units import pfc_headroom

SLOTS = 64
MAX_SEGMENTS = 3  # h_encaps_1 .. h_encaps_3 in fabric.p4


class Bmv2TableError(ValueError):
    pass


def slots(group: Group) -> list[int]:
    """Member indices in slot order, as emu.dataplane.tables.GroupState lays them out."""
    weights = [m.weight for m in group.members]
    return list(range(len(weights))) if len(set(weights)) == 1 else smooth_wrr(weights, SLOTS)


def bmv2_port(index: int) -> int:
    """Engine port index -> BMv2 port number (Mininet numbers switch ports from 1)."""
    return index + 1


def table_commands(tables: SwitchTables, *, port_macs: list[str], dscp_to_tc: list[int] | None = None,
                   ecn_red: dict[int, tuple[int, int, int]] | None = None,
                   pfc: dict[int, tuple[int, int, int]] | None = None, lossless: tuple[int, ...] = (),
                   trim: dict[int, tuple[int, int]] | None = None) -> list[str]:
    """`ecn_red`: per port (Kmin, Kmax in packets, step = Pmax x 65536 / (Kmax - Kmin)), see red_params.
    `trim`: per port (the queue depth in packets from which a trimmable write is cut, the cut's DSCP).
    `pfc`: per port (XOFF bytes, XON bytes, XOFF refresh in wall us) for each `lossless` priority, see
    pfc_params; without it fabric.p4 charges nothing and sends no pause."""
    tables.validate()
    out: list[str] = []
    for dscp, tc in enumerate(dscp_to_tc or []):
        if tc:
            out.append(f"table_add dscp_to_priority set_priority {dscp} => {tc}")
    size = {}
    for g in tables.groups:
        order = slots(g)
        size[g.id] = len(order)
        for slot, i in enumerate(order):
            m = g.members[i]
            if m.port >= len(port_macs):
                raise Bmv2TableError(f"group {g.id} uses port {m.port}, but the switch has {len(port_macs)}")
            out.append(f"table_add nexthop_member set_nexthop {g.id} {slot} => "
                       f"{bmv2_port(m.port)} {m.mac} {port_macs[m.port]}")
    spray = {g.id: int(g.mode == "spray") for g in tables.groups}
    for r in tables.routes:
        net = ipaddress.ip_network(r.prefix, strict=False)
        table = "ipv6_lpm" if net.version == 6 else "ipv4_lpm"
        out.append(f"table_add {table} set_group {net} => {r.group} {size[r.group]} {spray[r.group]}")
    for sid in tables.my_sids:
        if sid.action == "End":
            out.append(f"table_add my_sid srv6_end {sid.sid}/128 =>")
        elif sid.action == "End.X":
            out.append(f"table_add my_sid srv6_end_x {sid.sid}/128 => {sid.group} {size[sid.group]}")
        else:
            out.append(f"table_add my_sid srv6_end_dt6 {sid.sid}/128 =>")
    for e in tables.encaps:
        n = len(e.segments)
        if n > MAX_SEGMENTS:
            raise Bmv2TableError(f"policy for {e.prefix} has {n} segments; fabric.p4 carries at most {MAX_SEGMENTS}")
        out.append(f"table_add srv6_encap h_encaps_{n} {e.prefix} => {e.source} {' '.join(e.segments)}")
    for port, (kmin, kmax, step) in sorted((ecn_red or {}).items()):
        out.append(f"table_add ecn_red set_ecn_red {bmv2_port(port)} => {kmin} {kmax} {step}")
    for port, (qdepth, dscp) in sorted((trim or {}).items()):
        out.append(f"table_add trim_cfg set_trim {bmv2_port(port)} => {qdepth} {dscp}")
    for port, (xoff, xon, refresh) in sorted((pfc or {}).items()):
        for prio in lossless:
            out.append(f"table_add pfc_threshold set_pfc {bmv2_port(port)} {prio} => {xoff} {xon} {refresh}")
    return out


def pfc_params(*, rate_bps: float, delay_s: float, ports: int, queue_bytes: int,
               dilation: float) -> tuple[int, int, int]:
    """fabric.p4's PFC thresholds for one ingress port: (XOFF, XON) in bytes charged to that port and
    priority, and how often (wall us) an XOFF in force is sent again, at half its 0xFFFF quanta.

    BMv2's queues are per egress port, of `queue_bytes`; in the worst case every other port fills
    one queue at once, each with its XOFF, the headroom that still arrives after it (the link's
    round trip at line rate and the frames in flight, as the engine's pfc_headroom) and the bytes the
    MAC has not yet credited back (WireBox.CREDIT_BATCH). Divided by all ports, not the others, so
    a two-port switch keeps half its queue in reserve. XON at half XOFF, so a congested port sends
    few pause frames."""
    headroom = pfc_headroom(rate_bps, delay_s)
    xoff = max(2 * 1500, queue_bytes // max(2, ports) - headroom - WireBox.CREDIT_BATCH)
    refresh_us = int(0xFFFF * 512 / rate_bps * dilation * 1e6 / 2)
    return xoff, xoff // 2, max(1, refresh_us)


def hash_commands(seed: int) -> list[str]:
    """This switch's odd hash multiplier (fabric.p4's hash_mult), drawn from its seed as the native
    engine draws its own: switches with different seeds split the same flows differently."""
    return [f"register_write FabricIngress.hash_mult 0 {random.Random(seed).getrandbits(32) | 1}"]


def mirror_commands(ports: list[int]) -> list[str]:
    """One clone session per port, numbered as the port: where fabric.p4 sends its pause frames."""
    return [f"mirroring_add {bmv2_port(p)} {bmv2_port(p)}" for p in ports]


def red_params(kmin_bytes: int, kmax_bytes: int, pmax: float, mean_frame: int = 1500) -> tuple[int, int, int]:
    """The engine's RED thresholds in what fabric.p4 can compare: BMv2 counts its queues in packets
    (at a mean frame size), and has no division, so the slope comes precomputed per 1/65536."""
    kmin = max(1, kmin_bytes // mean_frame)
    kmax = max(kmin + 1, kmax_bytes // mean_frame)
    return kmin, kmax, max(1, round(min(1.0, pmax) * 65536 / (kmax - kmin)))


def queue_commands(port: int, *, rate_bps: float, dilation: float, depth_pkts: int, mean_frame: int = 1500) -> list[str]:
    """BMv2 paces queues in packets per second: the dilated link rate at a mean frame size.

    Byte-accurate rate needs tc on the link (--links netem) or the engine's link model.
    """
    pps = max(1, int(rate_bps / dilation / (8 * mean_frame)))
    return [f"set_queue_rate {pps} {bmv2_port(port)}", f"set_queue_depth {depth_pkts} {bmv2_port(port)}"]
