"""The table model as simple_switch_CLI commands, against expected text (no BMv2 needed)."""

from __future__ import annotations

import pytest

from emu.backends.bmv2.cli import (
    Bmv2TableError,
    mirror_commands,
    pfc_params,
    queue_commands,
    red_params,
    table_commands,
)
from emu.backends.bmv2.plane import Bmv2RuntimeError, InstalledTables, counter_values
from emu.control.model import EncapPolicy, MySid, SwitchTables
from emu.control.routes import Attachment, FabricGraph, LocalEntries, compute_tables, with_local
from emu.units import pfc_headroom

MACS = ["02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"]


def small_fpf(*, l0_s1_down: bool = False) -> dict[str, SwitchTables]:
    """One plane: leaves l0 (gpu0 on port 0) and l1 (gpu1 on port 0), spines s0 and s1."""
    g = FabricGraph()
    for n in ("l0", "l1", "s0", "s1"):
        g.add_switch(n)
    g.add_link("l0", 1, "02:00:00:00:00:02", "s0", 0, "02:00:00:00:0a:00", 100e9)
    g.add_link("l0", 2, "02:00:00:00:00:03", "s1", 0, "02:00:00:00:0b:00", 100e9)
    g.add_link("l1", 1, "02:00:00:00:01:02", "s0", 1, "02:00:00:00:0a:01", 100e9)
    g.add_link("l1", 2, "02:00:00:00:01:03", "s1", 1, "02:00:00:00:0b:01", 100e9)
    for d in g.links_between("l0", "s1") if l0_s1_down else []:
        d["up"] = False
    return compute_tables(g, [Attachment("10.0.0.2/32", "l0", 0, "02:aa:00:00:00:00"),
                              Attachment("10.0.1.2/32", "l1", 0, "02:aa:00:00:00:01")])


def test_fpf_leaf_commands():
    cmds = table_commands(small_fpf()["l0"], port_macs=MACS, dscp_to_tc=[3 if d == 26 else 0 for d in range(64)],
                          ecn_red={1: red_params(100_000, 400_000, 0.01), 2: (10, 20, 6554)})
    assert cmds == [
        "table_add dscp_to_priority set_priority 26 => 3",
        "table_add nexthop_member set_nexthop 0 0 => 1 02:aa:00:00:00:00 02:00:00:00:00:01",
        "table_add nexthop_member set_nexthop 1 0 => 2 02:00:00:00:0a:00 02:00:00:00:00:02",
        "table_add nexthop_member set_nexthop 1 1 => 3 02:00:00:00:0b:00 02:00:00:00:00:03",
        "table_add ipv4_lpm set_group 10.0.0.2/32 => 0 1 0",
        "table_add ipv4_lpm set_group 10.0.1.2/32 => 1 2 0",
        "table_add ecn_red set_ecn_red 2 => 66 266 3",
        "table_add ecn_red set_ecn_red 3 => 10 20 6554",
    ]


def test_pfc_entries_per_port_and_lossless_priority_with_a_clone_session_each():
    cmds = table_commands(small_fpf()["l0"], port_macs=MACS, pfc={0: (40_000, 20_000, 1000), 2: (9000, 4500, 7)},
                          lossless=(3, 4))
    assert [c for c in cmds if "pfc_threshold" in c] == [
        "table_add pfc_threshold set_pfc 1 3 => 40000 20000 1000",
        "table_add pfc_threshold set_pfc 1 4 => 40000 20000 1000",
        "table_add pfc_threshold set_pfc 3 3 => 9000 4500 7",
        "table_add pfc_threshold set_pfc 3 4 => 9000 4500 7",
    ]
    assert mirror_commands([0, 1]) == ["mirroring_add 1 1", "mirroring_add 2 2"]
    assert not [c for c in table_commands(small_fpf()["l0"], port_macs=MACS) if "pfc" in c]  # PFC off: none


def test_pfc_thresholds_leave_room_for_every_other_port_and_its_headroom():
    """Six ports, a 256 KiB queue: five ingress ports may fill one queue together, each up to XOFF plus
    what still arrives after it; that must fit. The refresh is half of 0xFFFF quanta, in wall us."""
    queue = 256 << 10
    xoff, xon, refresh = pfc_params(rate_bps=100e9, delay_s=0.5e-6, ports=6, queue_bytes=queue, dilation=10_000)
    assert 5 * (xoff + pfc_headroom(100e9, 0.5e-6) + 6000) <= queue and xoff > 15_000 and xon == xoff // 2
    two_ports = pfc_params(rate_bps=100e9, delay_s=0.5e-6, ports=2, queue_bytes=queue, dilation=10_000)[0]
    assert two_ports + pfc_headroom(100e9, 0.5e-6) + 6000 <= queue // 2  # a spine keeps half in reserve
    assert refresh == pytest.approx(0xFFFF * 512 / 100e9 * 10_000 * 1e6 / 2, abs=1)
    assert pfc_params(rate_bps=100e9, delay_s=1e-3, ports=6, queue_bytes=queue, dilation=1)[0] == 3000  # floor


def test_red_params_are_the_engines_thresholds_in_packets_and_a_slope_per_65536():
    assert red_params(100_000, 400_000, 0.01) == (66, 266, 3)  # 1 % over 200 packets: 655.36 / 200
    assert red_params(30_000, 120_000, 1.0) == (20, 80, 1092)
    assert red_params(1000, 1000, 0.5) == (1, 2, 32768)  # never a zero-width band


def test_rbb_edge_router_commands():
    g = FabricGraph()
    for n in ("pe0", "r0"):
        g.add_switch(n)
    g.add_link("pe0", 1, "02:00:00:00:00:02", "r0", 0, "02:00:00:00:0a:00", 400e9)
    local = {"pe0": LocalEntries(
        my_sids=[MySid("fc00:5::e", "End"), MySid("fc00:5::d6", "End.DT6")],
        encaps=[EncapPolicy("fd00:1::/64", ("fc00:4::e", "fc00:3::e", "fc00:6::d6"), "fd00:ff::6")])}
    tables = with_local(compute_tables(g, [Attachment("fd00:0:0::2/128", "pe0", 0, "02:aa:00:00:00:00"),
                                           Attachment("fc00:0::e/128", "r0")]), local)
    assert table_commands(tables["pe0"], port_macs=MACS) == [
        "table_add nexthop_member set_nexthop 0 0 => 1 02:aa:00:00:00:00 02:00:00:00:00:01",
        "table_add nexthop_member set_nexthop 1 0 => 2 02:00:00:00:0a:00 02:00:00:00:00:02",
        "table_add ipv6_lpm set_group fd00::2/128 => 0 1 0",
        "table_add ipv6_lpm set_group fc00::e/128 => 1 1 0",
        "table_add my_sid srv6_end fc00:5::e/128 =>",
        "table_add my_sid srv6_end_dt6 fc00:5::d6/128 =>",
        "table_add srv6_encap h_encaps_3 fd00:1::/64 => fd00:ff::6 fc00:4::e fc00:3::e fc00:6::d6",
    ]


def test_weighted_group_gets_64_interleaved_slots():
    g = FabricGraph()
    for n in ("a", "b", "c", "d"):
        g.add_switch(n)
    g.add_link("a", 1, "m1", "b", 0, "02:00:00:00:0b:00", 400e9)
    g.add_link("a", 2, "m2", "c", 0, "02:00:00:00:0c:00", 400e9)
    g.add_link("b", 1, "x", "d", 0, "y", 400e9)
    g.add_link("c", 1, "x", "d", 1, "y", 100e9)
    cmds = table_commands(compute_tables(g, [Attachment("10.9.0.0/24", "d", 2, "h")])["a"], port_macs=MACS)
    members = [c for c in cmds if c.startswith("table_add nexthop_member")]
    assert len(members) == 64
    assert sum(" => 2 " in c for c in members) == 51 and sum(" => 3 " in c for c in members) == 13
    assert cmds[-1] == "table_add ipv4_lpm set_group 10.9.0.0/24 => 0 64 0"


def test_too_many_segments_is_refused_with_the_limit():
    t = SwitchTables(encaps=[EncapPolicy("fd00::/64", ("fc00::1", "fc00::2", "fc00::3", "fc00::4"), "fd00::9")])
    with pytest.raises(Bmv2TableError, match="at most 3"):
        table_commands(t, port_macs=MACS)


def test_queue_rate_is_packets_per_second_of_the_dilated_link():
    assert queue_commands(0, rate_bps=100e9, dilation=1000, depth_pkts=64) == [
        "set_queue_rate 8333 1", "set_queue_depth 64 1"]


def cli_output(commands: list[str]) -> str:
    """What simple_switch_CLI prints for table_add commands: handles count per table from 0."""
    out, per_table = [], {}
    for c in commands:
        table = c.split()[1]
        h = per_table[table] = per_table.get(table, -1) + 1
        out.append(f"RuntimeCmd: Adding entry to match table FabricIngress.{table}\nEntry has been added with handle {h}")
    return "\n".join(out) + "\nRuntimeCmd: \n"


def test_a_failure_is_a_diff_made_before_broken():
    installed = InstalledTables()
    first, adds = installed.update(table_commands(small_fpf()["l0"], port_macs=MACS))
    assert first == table_commands(small_fpf()["l0"], port_macs=MACS) and len(adds) == 5
    installed.added(adds, cli_output(first))
    cmds, adds = installed.update(table_commands(small_fpf(l0_s1_down=True)["l0"], port_macs=MACS))
    # gpu1's route shrinks to the one spine left before that spine's slot goes: no packet meets a hole.
    assert cmds == [
        "table_modify ipv4_lpm set_group 1 => 1 1 0",
        "table_delete nexthop_member 2",
    ] and adds == []
    back, adds = installed.update(table_commands(small_fpf()["l0"], port_macs=MACS))
    assert back == [
        "table_add nexthop_member set_nexthop 1 1 => 3 02:00:00:00:0b:00 02:00:00:00:00:03",
        "table_modify ipv4_lpm set_group 1 => 1 2 0",
    ]
    installed.added(adds, cli_output(back[:1]))
    assert installed.entries[("nexthop_member", "1 1")][1] == 0


def test_missing_handles_are_an_error_not_a_guess():
    installed = InstalledTables()
    cmds, adds = installed.update(table_commands(small_fpf()["l0"], port_macs=MACS))
    with pytest.raises(Bmv2RuntimeError, match="added 4 of 5 entries"):
        installed.added(adds, cli_output(cmds[:4]))


def test_counter_values_are_read_from_the_cli_answer():
    """simple_switch_CLI 1.15's own words, two answers in one session's output."""
    out = ("Obtaining JSON from switch...\nDone\nControl utility for runtime P4 table manipulation\n"
           "RuntimeCmd: FabricIngress.rx_port[1]= (762 bytes, 9 packets)\n"
           "RuntimeCmd: FabricEgress.ecn_marked[12]= (0 bytes, 7 packets)\nRuntimeCmd: \n")
    assert counter_values(out) == {("FabricIngress.rx_port", 1): (9, 762), ("FabricEgress.ecn_marked", 12): (7, 0)}
    assert counter_values("RuntimeCmd: Invalid counter operation (INVALID_INDEX)") == {}
