"""Table entries for examples/p4/ipv6_ecmp.p4, one switch at a time (`--p4-tables` of `emu up`).

Every IPv6 destination the fabric routes gets a route to a group of slots, one slot per equal-cost
next hop; destinations with the same next hops share a group. A slot sends the packet out of its port
with that port's MAC as source and the neighbour's as destination.
"""

from __future__ import annotations

from emu.backends.bmv2.program import SwitchFacts


def tables(switch: SwitchFacts) -> list[str]:
    out: list[str] = []
    first_slot: dict[tuple[int, ...], int] = {}  # a group's ports -> its first slot
    for prefix, ports in sorted(switch.next_hops.items()):
        if ":" not in prefix:
            continue  # the program forwards IPv6 only
        if ports not in first_slot:
            first_slot[ports] = sum(len(p) for p in first_slot)
            for slot, number in enumerate(ports, start=first_slot[ports]):
                port = switch.port(number)
                out.append(f"table_add slots set_next_hop {slot} => {port.port} {port.mac} {port.peer_mac}")
        out.append(f"table_add routes set_group {prefix} => {first_slot[ports]} {len(ports)}")
    return out
