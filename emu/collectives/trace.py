"""Chakra execution traces, read with MLCommons' own schema and reader (the `mlc-chakra` package), as the
replay job inside the engine takes them (emu.collectives.job.ReplayJob).

A trace is one file per rank, `PREFIX.RANK.et` (what Chakra's converter and generator write): a
GlobalMetadata message, then Node messages, each with its id, type, dependencies (data and control,
by id within the rank's file) and attributes. Read here:

- COMP_NODE: `duration_micros` of compute, one at a time on the rank's GPU;
- COMM_COLL_NODE: attribute `comm_type` (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BARRIER)
  and `comm_size` (bytes a rank), over every rank, or over the process group `pg_name` names, whose
  members the caller gives (`groups`: a trace names its groups but does not list them; ASTRA-sim takes
  them from a file of its own too); the k-th collective of a group on one of its ranks is the k-th on
  every other, in the order of the rank's nodes by id once dependencies allow (NCCL's one stream);
- COMM_SEND_NODE and COMM_RECV_NODE: point to point, `comm_size` bytes (or `tensor_size`) to the rank
  `comm_dst` or from `comm_src`, with `comm_tag` (0 if absent), as ASTRA-sim reads them; the j-th send
  from a rank to another with a tag is the j-th receive of that rank from it with that tag (same size),
  on the same one stream as the rank's collectives;
- METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE: no time.

Anything else (a send or receive without its peer, which Chakra's PyTorch converter does not record;
collectives over a process group whose members are not given; REDUCE, GATHER, SCATTER, BROADCAST) is
refused with one line naming the node: a replay that skipped it would report a step time that is not
the trace's.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Any

OPS = {"ALL_REDUCE": "allreduce", "ALL_GATHER": "allgather", "REDUCE_SCATTER": "reducescatter",
       "ALL_TO_ALL": "alltoall", "BARRIER": "allreduce"}
BARRIER_BYTES = 4  # a barrier is an allreduce of one element a rank (its data checked like any other)


class TraceError(ValueError):
    """A trace that cannot be replayed: one line naming the file, the rank or the node."""


@dataclass
class TraceNode:
    id: int
    name: str
    kind: str  # "comp", "coll", "send", "recv" or "none"
    deps: list[int]
    duration_s: float = 0.0
    op: str = ""
    size: int = 0
    peer: int = -1  # send, recv: the other rank
    tag: int = 0
    group: str = ""  # coll: its process group's name ("": every rank)


@dataclass
class Trace:
    """Every rank's nodes, the collectives ((op, bytes a rank, its ranks), each group's in the order its
    ranks issue them, group after group), and the point-to-point messages ((source, destination, bytes),
    each a send matched to its receive)."""

    path: str
    ranks: list[list[TraceNode]]
    collectives: list[tuple[str, int, tuple[int, ...]]] = field(default_factory=list)
    collective_of: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, node id) -> collective
    messages: list[tuple[int, int, int]] = field(default_factory=list)
    message_of: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, node id) -> message

    def to_params(self) -> list[list[list[Any]]]:
        """What the engine's job is given: [id, kind, deps, duration_s, index] per node, the index a
        collective's (its place in `collectives`) or a send's or receive's (its message), else -1."""
        out = []
        for r, nodes in enumerate(self.ranks):
            rows = []
            for n in issue_order(nodes):
                index = self.collective_of.get((r, n.id), self.message_of.get((r, n.id), -1))
                rows.append([n.id, n.kind, n.deps, n.duration_s, index])
            out.append(rows)
        return out


def _schema() -> tuple[Any, Any]:
    try:
        from chakra.schema.protobuf import et_def_pb2
        from chakra.src.third_party.utils import protolib
    except ImportError:
        raise TraceError("emu replay reads Chakra traces with MLCommons' mlc-chakra package, which is not "
                         "installed: pip install 'protobuf>=6.31' && pip install --no-deps mlc-chakra "
                         "(make setup does)") from None
    return et_def_pb2, protolib


def files(path: str) -> list[str]:
    """The per-rank files of trace `path`: PREFIX (PREFIX.0.et, PREFIX.1.et, ...) or a folder of them."""
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.et")))
        prefixes = {re.sub(r"\.\d+\.et$", "", f) for f in found}
        if len(prefixes) != 1:
            raise TraceError(f"{path}: a folder with one trace's PREFIX.RANK.et files, found "
                             f"{len(found)} files of {len(prefixes)} traces")
        path = prefixes.pop()
    ranked = {}
    for f in glob.glob(glob.escape(path) + ".*.et"):
        m = re.search(r"\.(\d+)\.et$", f)
        if m:
            ranked[int(m.group(1))] = f
    if not ranked:
        raise TraceError(f"no Chakra trace at {path}: expected {path}.0.et, {path}.1.et, ...")
    missing = sorted(set(range(max(ranked) + 1)) - set(ranked))
    if missing:
        raise TraceError(f"{path}: no file for rank{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing[:5]))} (ranks are 0 to {max(ranked)})")
    return [ranked[r] for r in range(len(ranked))]


def read(path: str, groups: dict[str, list[int]] | None = None) -> Trace:
    """Trace `path` read and checked: every node known, dependencies inside the rank's file and acyclic,
    and every rank of a group issuing the group's collectives in the same order. `groups`: each process
    group's ranks, by the name its collectives give (`pg_name`)."""
    pb, protolib = _schema()
    from google.protobuf.message import DecodeError

    ranks = []
    names = files(path)
    for fname in names:
        nodes = []
        with open(fname, "rb") as f:
            try:
                meta = pb.GlobalMetadata()
                if not protolib.decodeMessage(f, meta):
                    raise TraceError(f"{fname}: empty, or not a Chakra trace (no GlobalMetadata)")
                while True:
                    node = pb.Node()
                    if not protolib.decodeMessage(f, node):
                        break
                    nodes.append(_node(pb, node, fname))
            except DecodeError as exc:
                raise TraceError(f"{fname}: not a Chakra trace after {len(nodes)} nodes ({exc})") from None
        _check_deps(nodes, fname)
        ranks.append(nodes)
    if len(ranks) < 2:
        raise TraceError(f"{path}: one rank; a replay needs at least 2")
    collectives, collective_of = _collectives(path, names, ranks, groups or {})
    messages, message_of = _match(path, ranks)
    return Trace(path, ranks, collectives, collective_of, messages, message_of)


def _members(name: str, ranks: Any, n: int) -> tuple[int, ...]:
    if (not isinstance(ranks, list) or len(ranks) < 2 or len(set(ranks)) != len(ranks)
            or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < n for r in ranks)):
        raise TraceError(f"process group {name!r}: give two or more distinct ranks of 0 to {n - 1}, not {ranks!r}")
    return tuple(sorted(ranks))


def _collectives(path: str, names: list[str], ranks: list[list[TraceNode]], groups: dict[str, list[int]]
                 ) -> tuple[list[tuple[str, int, tuple[int, ...]]], dict[tuple[int, int], int]]:
    """Each group's collectives in the order its ranks issue them (the same on every one of its ranks),
    numbered group after group (every rank first, then the named groups by their ranks)."""
    n = len(ranks)
    everyone = tuple(range(n))
    members = {name: _members(name, rs, n) for name, rs in groups.items()}
    seqs: dict[tuple[int, ...], dict[int, list[TraceNode]]] = {}
    for r, nodes in enumerate(ranks):
        for node in issue_order(nodes):
            if node.kind != "coll":
                continue
            where = f"{names[r]}: node {node.id} ({node.name or 'unnamed'})"
            if node.group and node.group not in members:
                raise TraceError(f"{where}: a collective over process group {node.group!r}, whose ranks are not "
                                 f"given (--groups FILE: {{\"{node.group}\": [0, 1, ...]}}, as ASTRA-sim's "
                                 "communicator groups)")
            group = members[node.group] if node.group else everyone
            if r not in group:
                raise TraceError(f"{where}: rank {r} is not in process group {node.group!r} {list(group)}")
            seqs.setdefault(group, {m: [] for m in group})[r].append(node)
    collectives: list[tuple[str, int, tuple[int, ...]]] = []
    collective_of: dict[tuple[int, int], int] = {}
    for group in sorted(seqs, key=lambda g: (g != everyone, g)):
        said = "" if group == everyone else f" in group {list(group)}"
        first = group[0]
        want = [(x.op, x.size) for x in seqs[group][first]]
        for r in group[1:]:
            seq = [(x.op, x.size) for x in seqs[group][r]]
            if seq != want:
                k = next((i for i, (a, b) in enumerate(zip(seq, want, strict=False)) if a != b), min(len(seq), len(want)))
                raise TraceError(f"{path}: rank {r}'s collective {k}{said} is {_say(seq, k)}, rank {first}'s "
                                 f"{_say(want, k)}: every rank of a group must issue its collectives in the "
                                 "same order")
        for k, (op, size) in enumerate(want):
            for r in group:
                collective_of[(r, seqs[group][r][k].id)] = len(collectives)
            collectives.append((op, size, group))
    return collectives, collective_of


def _match(path: str, ranks: list[list[TraceNode]]) -> tuple[list[tuple[int, int, int]], dict[tuple[int, int], int]]:
    """Each send matched to its receive: the j-th from src to dst with a tag, in the ranks' issue orders."""
    n = len(ranks)
    sends: dict[tuple[int, int, int], list[TraceNode]] = {}
    recvs: dict[tuple[int, int, int], list[TraceNode]] = {}
    for r, nodes in enumerate(ranks):
        for node in issue_order(nodes):
            if node.kind not in ("send", "recv"):
                continue
            if not 0 <= node.peer < n or node.peer == r:
                raise TraceError(f"{path}: rank {r}'s node {node.id} ({node.name or node.kind}): its peer is rank "
                                 f"{node.peer}; the trace has ranks 0 to {n - 1}, and a rank does not message itself")
            key = (r, node.peer, node.tag) if node.kind == "send" else (node.peer, r, node.tag)
            (sends if node.kind == "send" else recvs).setdefault(key, []).append(node)
    messages: list[tuple[int, int, int]] = []
    message_of: dict[tuple[int, int], int] = {}
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        out, into = sends.get(key, []), recvs.get(key, [])
        if len(out) != len(into):
            raise TraceError(f"{path}: rank {src} sends {len(out)} message(s) to rank {dst} (tag {tag}) and rank "
                             f"{dst} receives {len(into)}: every send needs its receive")
        for a, b in zip(out, into, strict=True):
            if a.size != b.size:
                raise TraceError(f"{path}: rank {src}'s send {a.id} to rank {dst} is {a.size} B and rank {dst}'s "
                                 f"receive {b.id} {b.size} B")
            message_of[(src, a.id)] = message_of[(dst, b.id)] = len(messages)
            messages.append((src, dst, a.size))
    return messages, message_of


def _say(seq: list[tuple[str, int]], k: int) -> str:
    return f"{seq[k][0]} of {seq[k][1]} B" if k < len(seq) else "missing"


def _attrs(node: Any) -> dict[str, Any]:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr if a.WhichOneof("value")}


def _node(pb: Any, node: Any, fname: str) -> TraceNode:
    deps = sorted(set(node.data_deps) | set(node.ctrl_deps))
    where = f"{fname}: node {node.id} ({node.name or 'unnamed'})"
    kind = pb.NodeType.Name(node.type)
    if kind == "COMP_NODE":
        return TraceNode(node.id, node.name, "comp", deps, duration_s=node.duration_micros * 1e-6)
    if kind in ("METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE"):
        return TraceNode(node.id, node.name, "none", deps)
    if kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        attrs = _attrs(node)
        peer = "comm_dst" if kind == "COMM_SEND_NODE" else "comm_src"
        if peer not in attrs:
            raise TraceError(f"{where}: {kind} without {peer}: its peer rank is not in the trace (Chakra's "
                             "PyTorch converter does not record it; ASTRA-sim's comm_src, comm_dst and comm_tag "
                             "are read)")
        if attrs.get("pg_name", "") not in ("", "0"):
            raise TraceError(f"{where}: a {kind} in process group {attrs['pg_name']!r}; only ranks of the whole "
                             "trace are replayed")
        size = int(attrs.get("comm_size", attrs.get("tensor_size", 0)))
        if size <= 0:
            raise TraceError(f"{where}: {kind} of comm_size {size}: a size in bytes is needed")
        return TraceNode(node.id, node.name, "send" if kind == "COMM_SEND_NODE" else "recv", deps, size=size,
                         peer=int(attrs[peer]), tag=int(attrs.get("comm_tag", 0)))
    if kind == "COMM_COLL_NODE":
        attrs = _attrs(node)
        if "comm_type" not in attrs:
            raise TraceError(f"{where}: a collective without comm_type")
        ctype = pb.CollectiveCommType.Name(attrs["comm_type"])
        if ctype not in OPS:
            raise TraceError(f"{where}: {ctype} is not replayed (only {', '.join(OPS)})")
        if attrs.get("involved_dim", "") not in ("", "0"):
            raise TraceError(f"{where}: a collective over the dimensions {attrs['involved_dim']!r}; only "
                             "collectives over every rank or over a named process group are replayed")
        group = str(attrs.get("pg_name", ""))
        group = "" if group == "0" else group
        size = BARRIER_BYTES if ctype == "BARRIER" else int(attrs.get("comm_size", 0))
        if size <= 0:
            raise TraceError(f"{where}: {ctype} of comm_size {size}: a size in bytes is needed")
        return TraceNode(node.id, node.name, "coll", deps, op=OPS[ctype], size=size, group=group)
    raise TraceError(f"{where}: {kind} is not replayed (compute, collectives over every rank, sends and "
                     "receives, metadata and memory nodes are)")


def _check_deps(nodes: list[TraceNode], fname: str) -> None:
    ids = {n.id for n in nodes}
    if len(ids) != len(nodes):
        raise TraceError(f"{fname}: node ids repeat")
    for n in nodes:
        unknown = [d for d in n.deps if d not in ids]
        if unknown:
            raise TraceError(f"{fname}: node {n.id} ({n.name or 'unnamed'}) depends on node {unknown[0]}, "
                             "which is not in the file")
    issue_order(nodes, fname)  # raises on a cycle


def issue_order(nodes: list[TraceNode], fname: str = "") -> list[TraceNode]:
    """The nodes in the order a rank issues them: each once its dependencies are, the lowest id first."""
    import heapq

    by_id = {n.id: n for n in nodes}
    waiting = {n.id: len(n.deps) for n in nodes}
    children: dict[int, list[int]] = {}
    for n in nodes:
        for d in n.deps:
            children.setdefault(d, []).append(n.id)
    ready = [i for i, c in waiting.items() if c == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(by_id[i])
        for c in children.get(i, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(out) != len(nodes):
        stuck = sorted(i for i, c in waiting.items() if c > 0)[:5]
        raise TraceError(f"{fname}: the dependencies of nodes {stuck} form a cycle")
    return out
