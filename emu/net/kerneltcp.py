"""What the hosts' kernels' TCP did on its own timers during a job, from each host namespace's counters.

The kernel's timers keep the wall's time whatever D is (docs/architecture.md): a retransmission
timeout (its floor is 200 ms) or a tail loss probe fires after wall time, so at D = 4000 the floor is
50 us of fabric time, where a real host would wait 200 ms. The fidelity verdict covers the engine,
not the hosts' kernels; so a job in which these timers fired says so beside its verdict (`emu run`),
and a figure one fell in is partly the emulator's (a spurious timeout, whose segment had arrived,
included: the sender waited on it all the same). The counters are the namespace's own (the TcpExt
table of /proc/PID/net/netstat of a process in it), read before and after the job.
"""

from __future__ import annotations

# TcpExt counters: retransmission timeouts, those undone as spurious, tail loss probes.
TIMERS = ("TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes")


def _table(text: str, prefix: str) -> dict[str, int]:
    """One of /proc/net/netstat's or snmp's tables: a line of names, then a line of values."""
    lines = [ln.split() for ln in text.splitlines() if ln.startswith(prefix + ":")]
    out: dict[str, int] = {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        out.update({n: int(v) for n, v in zip(names[1:], values[1:], strict=True) if v.lstrip("-").isdigit()})
    return out


def counters(pid: int) -> dict[str, int]:
    """The TCP timer counters of the network namespace process `pid` is in ({} if it is gone)."""
    try:
        with open(f"/proc/{pid}/net/netstat") as f:
            ext = _table(f.read(), "TcpExt")
    except OSError:
        return {}
    return {k: ext.get(k, 0) for k in TIMERS}


def fired(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, int]:
    """Each timer's firings over the job, summed over the hosts read both times (only timers that fired)."""
    total = {k: 0 for k in TIMERS}
    for host, a in after.items():
        b = before.get(host)
        if not b or not a:
            continue
        for k in TIMERS:
            total[k] += max(0, a.get(k, 0) - b.get(k, 0))
    return {k: n for k, n in total.items() if n}


def said(timers: dict[str, int], dilation: float) -> str:
    """One line on what fired, or "" if nothing did."""
    rto, spurious, tlp = (timers.get(k, 0) for k in TIMERS)
    if not rto and not tlp:
        return ""
    parts = []
    if rto:
        parts.append(f"{rto} retransmission timeout{'s' if rto != 1 else ''}"
                     + (f" ({spurious} of them spurious)" if spurious else ""))
    if tlp:
        parts.append(f"{tlp} tail loss probe{'s' if tlp != 1 else ''}")
    floor_us = 0.2 / dilation * 1e6
    return (f"the hosts' TCP: {' and '.join(parts)}, on the kernel's timers, which keep wall time (the "
            f"timeout's 200 ms floor is {floor_us:.3g} us of fabric time at D = {dilation:g}): a figure one fell "
            f"in is partly the emulator's")
