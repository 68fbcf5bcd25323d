"""Replay a Chakra execution trace on a fabric (`net.replay(...)`, `emu replay`): the trace read and
checked (emu.collectives.trace), its ranks placed on hosts, the replay run inside the engine on the
fabric clock (emu.collectives.job.ReplayJob), and the result: the step time, each collective's time
and how long its first rank waited for its last, and each rank's exposed communication (the step's
time it did not spend computing), with a timeline plot.
"""

from __future__ import annotations

from typing import Any

from emu.collectives import algorithms
from emu.collectives.run import MTU, RankHost, groups, ideal_fabric_s, job_params
from emu.collectives.trace import Trace

__all__ = ["params", "summarise", "plot"]


def params(hosts: list[RankHost], trace: Trace, *, algo: str | None = None, cc: str = "none", seed: int = 0,
           trim_dscp: int | None = None, spray: str = "weighted") -> dict[str, Any]:
    """The replay job's parameters: rank r on hosts[r]."""
    n = len(trace.ranks)
    if len(hosts) < n:
        raise ValueError(f"the trace has {n} ranks and this fabric {len(hosts)} hosts: one rank a host")
    hosts = hosts[:n]
    if algo == algorithms.AUTO:
        raise ValueError("a replay takes one algorithm for the collectives that run it, not auto (auto is "
                         "`emu bench collective`'s: it picks by size, and a trace's collectives have many)")
    if algo is not None:
        for op, members in dict.fromkeys((op, members) for op, _, members in trace.collectives):
            if algo in algorithms.FOR_OP[op]:
                algorithms.check(algo, op, len(members), groups([hosts[r] for r in members]))
    compute = max(sum(node.duration_s for node in nodes) for nodes in trace.ranks)
    ideal = sum(ideal_fabric_s([hosts[r] for r in members], op, [max(size, 4 * len(members))])
                for op, size, members in trace.collectives)
    ideal += sum(size for _, _, size in trace.messages) * 8 / min(sum(rate for _, rate in h.ports) for h in hosts)
    base = job_params(hosts, "allreduce", [4 * n], cc=cc, seed=seed, trim_dscp=trim_dscp, spray=spray)
    return {**base, "op": None, "sizes": None, "algo": algo,
            # Whole elements a rank, at least one each (as whole_chunks rounds a collective's sizes).
            "collectives": [[op, max(4 * len(m), size // (4 * len(m)) * 4 * len(m)), list(m)]
                            for op, size, m in trace.collectives],
            "nodes": trace.to_params(),
            "messages": [list(m) for m in trace.messages],
            "budget_s": 100 * (compute + ideal) + 0.01}


def summarise(trace: Trace, hosts: list[RankHost], ranks: list[dict[str, Any]], stats: dict[str, Any],
              fidelity: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """The replay's figures, in fabric microseconds."""
    n = len(trace.ranks)
    colls = []
    for k, (op, size, members) in enumerate(sent["collectives"]):
        rows = [row for r in ranks for row in r["collectives"] if row[0] == k]
        colls.append({"index": k, "op": op, "size": size, **({"ranks": members} if len(members) < n else {}),
                      "start_us": rows[0][2] * 1e6,
                      "time_us": (max(row[3] for row in rows) - rows[0][2]) * 1e6,
                      "waited_us": (rows[0][2] - min(row[1] for row in rows)) * 1e6,
                      "wrong": sum(row[4] for row in rows)})
    ends = {(row[0], row[1]): (row[2], row[3]) for r in ranks for row in r.get("messages", [])}
    msgs = [{"index": m, "src": src, "dst": dst, "size": size,
             "send_start_us": ends[(m, "send")][0] * 1e6, "send_end_us": ends[(m, "send")][1] * 1e6,
             "recv_start_us": ends[(m, "recv")][0] * 1e6, "recv_end_us": ends[(m, "recv")][1] * 1e6}
            for m, (src, dst, size) in enumerate(sent.get("messages", []))]
    per_rank = [{"rank": r["rank"], "host": hosts[r["rank"]].name, "end_us": r["end_s"] * 1e6,
                 "compute_us": r["compute_s"] * 1e6, "exposed_comm_us": (r["end_s"] - r["compute_s"]) * 1e6}
                for r in ranks]
    hops = sum(p.get("tx_packets", 0) + p.get("host_nic", {}).get("tx_packets", 0)
               for s in stats["switches"].values() for p in s["ports"].values())
    return {"trace": trace.path, "nranks": n, "algo": sent["algo"] or "default", "mtu": MTU,
            "step_time_us": max(r["end_us"] for r in per_rank),
            "exposed_comm_us": max(r["exposed_comm_us"] for r in per_rank),
            "collectives": colls, "messages": msgs, "ranks": per_rank,
            "wrong": sum(c["wrong"] for c in colls),
            "retransmits": sum(r.get("retransmits", 0) for r in ranks), "packet_hops": hops,
            "timeline": {r["rank"]: r["timeline"] for r in ranks},
            "waits": {r["rank"]: [[row[1], row[2]] for row in r["collectives"]] for r in ranks}, "fidelity": fidelity}


def plot(result: dict[str, Any], path: str) -> None:
    """Each rank's timeline: compute above, communication below (a collective, and before it in grey the
    wait from when this rank issued it to when its last rank did)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = result["nranks"]
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.45 * n))
    named: set[str] = set()

    def bar(y: float, start: float, end: float, colour: str, label: str) -> None:
        ax.barh(y, (end - start) * 1e6, left=start * 1e6, height=0.34, color=colour,
                label=None if label in named else label)
        named.add(label)

    for rank, rows in result["timeline"].items():
        y = int(rank)
        for _nid, kind, start, end in rows:
            if kind == "comp":
                bar(y - 0.18, start, end, "tab:blue", "compute")
            elif kind == "coll":
                bar(y + 0.18, start, end, "tab:red", "collective")
        for issued, start in result["waits"].get(rank, []):
            if start > issued:
                bar(y + 0.18, issued, start, "lightgrey", "waiting for the last rank")
    ax.set_yticks(range(n), [f"rank {r}" for r in range(n)])
    ax.invert_yaxis()
    ax.set_xlabel("fabric time (us)")
    ax.set_title(f"{result['trace']}: step {result['step_time_us']:.1f} us, exposed communication up to "
                 f"{result['exposed_comm_us']:.1f} us", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.2 / n), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
