"""The hosts' kernels' TCP timers over a job (emu.net.kerneltcp): read from a namespace's counters, summed
over hosts, said in one line beside the verdict."""

from __future__ import annotations

import os

from emu.net import kerneltcp

NETSTAT = """TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes TCPSpuriousRTOs
TcpExt: 0 7 2 1
IpExt: InNoRoutes InOctets
IpExt: 0 123
"""


def test_a_namespaces_tables_are_read_by_name():
    assert kerneltcp._table(NETSTAT, "TcpExt") == {"SyncookiesSent": 0, "TCPTimeouts": 7, "TCPLossProbes": 2,
                                                    "TCPSpuriousRTOs": 1}
    assert kerneltcp._table(NETSTAT, "IpExt") == {"InNoRoutes": 0, "InOctets": 123}


def test_this_namespaces_counters_and_a_gone_process():
    got = kerneltcp.counters(os.getpid())
    assert set(got) == set(kerneltcp.TIMERS) and all(v >= 0 for v in got.values())
    assert kerneltcp.counters(2**22 + 12345) == {}  # above pid_max's default: no such process


def test_what_fired_is_summed_over_the_hosts_read_both_times():
    before = {"a": {"TCPTimeouts": 1, "TCPSpuriousRTOs": 0, "TCPLossProbes": 5}, "b": {"TCPTimeouts": 0}}
    after = {"a": {"TCPTimeouts": 4, "TCPSpuriousRTOs": 2, "TCPLossProbes": 5}, "b": {"TCPTimeouts": 1},
             "c": {"TCPTimeouts": 9}, "gone": {}}
    assert kerneltcp.fired(before, after) == {"TCPTimeouts": 4, "TCPSpuriousRTOs": 2}
    assert kerneltcp.fired(before, before) == {}


def test_the_line_names_each_timer_and_the_floor_in_fabric_time():
    assert kerneltcp.said({}, 1000) == ""
    assert kerneltcp.said({"TCPSpuriousRTOs": 1}, 1000) == ""  # counted only with a timeout
    line = kerneltcp.said({"TCPTimeouts": 3, "TCPSpuriousRTOs": 3, "TCPLossProbes": 1}, 4000)
    assert line.startswith("the hosts' TCP: 3 retransmission timeouts (3 of them spurious) and 1 tail loss probe, ")
    assert "200 ms floor is 50 us of fabric time at D = 4000" in line and line.endswith("partly the emulator's")
    assert kerneltcp.said({"TCPTimeouts": 1}, 1000).startswith("the hosts' TCP: 1 retransmission timeout, on")
