"""Chakra execution traces replayed (issue 39, item 1): traces made with Chakra's own schema, encoder and
generator; the step time against a critical path computed here, apart from the replay, from the trace's
durations and each collective's time alone on the same idle fabric; the same replay on the wall clock."""

from __future__ import annotations

import heapq
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.mininet]

pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2", reason="mlc-chakra is installed by make setup")
from chakra.src.third_party.utils.protolib import encodeMessage  # noqa: E402

from emu.net.switch import RunSettings  # noqa: E402

N = 8
FWD_US = [20 * (1 + r % 3) for r in range(N)]  # ranks reach the first collective at different times


def _attr(name: str, value: int):
    return pb.AttributeProto(name=name, int64_val=value)


def _coll(kind: int, size: int) -> list:
    return [_attr("comm_type", kind), _attr("comm_size", size)]


# rank -> [(id, name, type, deps, duration_us, attrs)]: forward, an allreduce of the gradients that the
# backward pass overlaps, the optimiser after both, an allgather of the parameters, a tail of compute.
def _step(r: int) -> list:
    return [(1, "fwd", pb.COMP_NODE, [], FWD_US[r], []),
            (2, "grad_allreduce", pb.COMM_COLL_NODE, [1], 0, _coll(pb.ALL_REDUCE, 1 << 20)),
            (3, "bwd", pb.COMP_NODE, [1], 30, []),
            (4, "opt", pb.COMP_NODE, [2, 3], 10, []),
            (5, "param_allgather", pb.COMM_COLL_NODE, [4], 0, _coll(pb.ALL_GATHER, 256 << 10)),
            (6, "tail", pb.COMP_NODE, [5], 5, [])]


def write_trace(prefix: str, nodes_of) -> str:
    for r in range(N):
        with open(f"{prefix}.{r}.et", "wb") as f:
            encodeMessage(f, pb.GlobalMetadata(version="0.0.4"))
            for i, name, kind, deps, dur, attrs in nodes_of(r):
                node = pb.Node(id=i, name=name, type=kind, duration_micros=dur)
                node.data_deps.extend(deps)
                node.attr.extend(attrs)
                encodeMessage(f, node)
    return prefix


def critical_path_us(alone_us: dict[int, float]) -> float:
    """The step by hand: each rank's compute one at a time in id order as dependencies allow, each
    collective starting when its last rank reaches it and taking its time alone (every rank's end)."""
    done: list[dict[int, float]] = [{} for _ in range(N)]
    coll_end: dict[int, float] = {}
    for node_id in (2, 5):  # the collectives in order; what precedes each, then the collective
        for r in range(N):
            _simulate(r, done[r], coll_end)
        start = max(max(done[r][d] for d in dict((n[0], n[3]) for n in _step(r))[node_id]) for r in range(N))
        coll_end[node_id] = start + alone_us[node_id]
    for r in range(N):
        _simulate(r, done[r], coll_end)
    return max(max(d.values()) for d in done)


def _simulate(r: int, done: dict[int, float], coll_end: dict[int, float]) -> None:
    nodes = {n[0]: n for n in _step(r)}
    free = max((done[i] for i in done if nodes[i][2] == pb.COMP_NODE), default=0.0)
    ready = [i for i in nodes if i not in done and all(d in done for d in nodes[i][3])]
    heapq.heapify(ready)
    while ready:
        i = heapq.heappop(ready)
        at = max((done[d] for d in nodes[i][3]), default=0.0)
        if nodes[i][2] == pb.COMP_NODE:
            free = done[i] = max(free, at) + nodes[i][4]
        elif i in coll_end:
            done[i] = coll_end[i]
        else:
            continue  # a collective not yet timed: what depends on it waits
        for j in nodes:
            if j not in done and j not in ready and all(d in done for d in nodes[j][3]):
                heapq.heappush(ready, j)


def test_a_training_step_replays_with_the_step_time_of_its_critical_path(tmp_path, no_leftovers):
    from emu import FabricNet, FPFTopo

    prefix = write_trace(str(tmp_path / "step"), _step)
    with FabricNet(FPFTopo(gpus=N, planes=8), clock="fabric", kernel=False) as net:
        r = net.replay(prefix)
        alone = {2: net.collective("allreduce", sizes=[1 << 20]).rows[0].time_us,
                 5: net.collective("allgather", sizes=[256 << 10]).rows[0].time_us}
    want = critical_path_us(alone)
    assert r["wrong"] == 0 and r["nranks"] == N and r["fidelity"]["ok"]
    assert r["step_time_us"] == pytest.approx(want, rel=0.01), (r["step_time_us"], want)
    (ar, ag) = r["collectives"]
    assert (ar["op"], ar["size"], ag["op"], ag["size"]) == ("allreduce", 1 << 20, "allgather", 256 << 10)
    assert ar["start_us"] == pytest.approx(max(FWD_US)) and ar["waited_us"] == pytest.approx(max(FWD_US) - min(FWD_US))
    assert ar["time_us"] == pytest.approx(alone[2], rel=0.01) and ag["time_us"] == pytest.approx(alone[5], rel=0.01)
    # Exposed communication: what the slowest-to-compute rank did not hide behind its compute.
    compute = [FWD_US[k] + 30 + 10 + 5 for k in range(N)]
    assert [x["compute_us"] for x in r["ranks"]] == pytest.approx(compute)
    assert r["exposed_comm_us"] == pytest.approx(max(x["end_us"] - c for x, c in zip(r["ranks"], compute, strict=True)))


def test_the_reference_core_replays_the_same_figures(tmp_path, no_leftovers):
    """Both cores replay the step to the same figures, and those figures are right: every element, the step
    the critical path of its own collectives' times, the allreduce no faster than its bytes allow."""
    from emu import FabricNet, FPFTopo

    prefix = write_trace(str(tmp_path / "step"), _step)
    out = {}
    for core in ("python", "native"):
        with FabricNet(FPFTopo(gpus=N, planes=2), settings=RunSettings(clock="fabric", kernel=False, core=core)) as net:
            r = net.replay(prefix)
        out[core] = {k: v for k, v in r.items() if k != "fidelity"}
    assert out["python"] == out["native"]
    r = out["native"]
    assert r["wrong"] == 0 and r["nranks"] == N, r
    ar, ag = r["collectives"]
    assert r["step_time_us"] == pytest.approx(critical_path_us({2: ar["time_us"], 5: ag["time_us"]}), rel=1e-9)
    # A ring allreduce sends 2 (N - 1) / N of its 1 MiB from each rank, here over 2 planes of 100G.
    assert ar["time_us"] > 2 * (N - 1) / N * (1 << 20) * 8 / 200e9 * 1e6, ar


@pytest.mark.long
def test_a_replay_and_tenants_on_the_wall_clock_give_the_fabric_clocks_figures(tmp_path, no_leftovers):
    """The same jobs inside the engine on its wall loop (one worker): at a D where the verdict is ok, the
    step time and each tenant's time within 1 % of the fabric clock's (a run that fell behind proves
    nothing, so D grows until one is on time; none on time fails)."""
    from emu import FabricNet, FPFTopo, Tenant

    prefix = write_trace(str(tmp_path / "step"), _step)
    tenants = (Tenant("allreduce", sizes=["256KiB"], hosts=["gpu0", "gpu1", "gpu2", "gpu3"]),
               Tenant("allgather", sizes=["256KiB"], hosts=["gpu4", "gpu5", "gpu6", "gpu7"]))

    def both(**clock) -> tuple[dict, list]:
        with FabricNet(FPFTopo(gpus=N, planes=2), **clock) as net:
            return net.replay(prefix), net.collectives(*tenants)

    fabric, fabric_t = both(clock="fabric")
    for d in (20_000, 100_000, 500_000):
        wall, wall_t = both(clock="wall", dilation=d)
        assert wall["wrong"] == 0 and wall["clock"] == "wall" and all(t.wrong == 0 for t in wall_t)
        if wall["fidelity"]["ok"] and all(t.fidelity["ok"] for t in wall_t):
            break
    else:
        pytest.fail(f"no wall-clock replay was on time up to D = {d:,} (worst: {wall['fidelity']['worst']})")
    assert wall["step_time_us"] == pytest.approx(fabric["step_time_us"], rel=0.01), d
    assert [t.rows[0].time_us for t in wall_t] == pytest.approx([t.rows[0].time_us for t in fabric_t], rel=0.01), d


ACT = 64 << 10  # an activation (and its gradient) between pipeline stages, bytes


def _p2p(kind: int, peer: int, size: int = ACT) -> list:
    return [_attr("comm_dst" if kind == pb.COMM_SEND_NODE else "comm_src", peer), _attr("comm_size", size)]


def _pipeline(r: int) -> list:
    """Two pipeline stages: rank r < 4 computes, sends its activation to r + 4, waits for the gradient back;
    rank r + 4 waits for it, computes 20 us, sends it back; then every rank allreduces 256 KiB (one stream:
    the allreduce after the rank's messages)."""
    if r < N // 2:
        return [(1, "fwd", pb.COMP_NODE, [], FWD_US[r], []),
                (2, "send_act", pb.COMM_SEND_NODE, [1], 0, _p2p(pb.COMM_SEND_NODE, r + N // 2)),
                (3, "recv_grad", pb.COMM_RECV_NODE, [2], 0, _p2p(pb.COMM_RECV_NODE, r + N // 2)),
                (4, "allreduce", pb.COMM_COLL_NODE, [3], 0, _coll(pb.ALL_REDUCE, 256 << 10))]
    return [(1, "recv_act", pb.COMM_RECV_NODE, [], 0, _p2p(pb.COMM_RECV_NODE, r - N // 2)),
            (2, "fwd_bwd", pb.COMP_NODE, [1], 20, []),
            (3, "send_grad", pb.COMM_SEND_NODE, [2], 0, _p2p(pb.COMM_SEND_NODE, r - N // 2)),
            (4, "allreduce", pb.COMM_COLL_NODE, [3], 0, _coll(pb.ALL_REDUCE, 256 << 10))]


def test_sends_and_receives_replay_in_order_no_faster_than_the_wire(tmp_path, no_leftovers):
    """A two-stage pipeline's messages: each stage-1 rank computes exactly when its activation is whole in
    its memory, which is no sooner than the sender's compute plus the bytes at its line rate; the
    gradient comes back the same way; the allreduce starts when its last rank issued it; both cores
    give the same figures; a send without its receive and a peer out of range are one line each."""
    from emu import FabricNet, FPFTopo
    from emu.collectives.trace import TraceError, read

    prefix = write_trace(str(tmp_path / "pipe"), _pipeline)
    out = {}
    for core in ("native", "python"):
        with FabricNet(FPFTopo(gpus=N, planes=2), settings=RunSettings(clock="fabric", kernel=False, core=core)) as net:
            out[core] = net.replay(prefix)
    r = out["native"]
    assert {k: v for k, v in r.items() if k != "fidelity"} == {k: v for k, v in out["python"].items() if k != "fidelity"}
    assert r["wrong"] == 0 and len(r["messages"]) == N
    wire_us = ACT * 8 / 200e9 * 1e6  # two 100G planes a host
    at = {(rank, row[0]): (row[2] * 1e6, row[3] * 1e6) for rank, rows in r["timeline"].items() for row in rows}
    for a in range(N // 2):
        b = a + N // 2
        act, grad = at[(b, 1)], at[(a, 3)]  # the receives' (start, end), us
        assert act[1] >= FWD_US[a] + wire_us, (a, act)
        assert at[(b, 2)][0] == act[1]  # the compute starts the instant the activation is whole
        assert grad[1] >= at[(b, 2)][1] + wire_us, (a, grad)
    (ar,) = r["collectives"]
    assert ar["start_us"] == pytest.approx(max(end for (_, nid), (_, end) in at.items() if nid == 3))
    for m in r["messages"]:
        assert m["size"] == ACT and m["recv_end_us"] >= m["send_start_us"] + wire_us, m

    def unmatched(x: int) -> list:  # rank 4 computes instead of receiving rank 0's activation
        return [(1, "idle", pb.COMP_NODE, [], 0, []), *_pipeline(x)[1:]] if x == N // 2 else _pipeline(x)
    with pytest.raises(TraceError, match="rank 0 sends 1 message.s. to rank 4 .tag 0. and rank 4 receives 0"):
        read(write_trace(str(tmp_path / "lost"), unmatched))

    def astray(x: int) -> list:
        nodes = _pipeline(x)
        return [n if n[0] != 2 or x else (2, "send_act", pb.COMM_SEND_NODE, [1], 0, _p2p(pb.COMM_SEND_NODE, 99))
                for n in nodes]
    with pytest.raises(TraceError, match="rank 0's node 2 .send_act.: its peer is rank 99"):
        read(write_trace(str(tmp_path / "astray"), astray))


DP = {"dp0": [0, 1, 2, 3], "dp1": [4, 5, 6, 7]}


def _grouped(r: int) -> list:
    """Two data-parallel groups, each allreducing 256 KiB inside itself (pg_name), dp0's after 10 us of
    compute and dp1's after 150 us (one at a time on the fabric), then every rank allreducing 64 KiB."""
    group = _coll(pb.ALL_REDUCE, 256 << 10) + [pb.AttributeProto(name="pg_name", string_val=f"dp{r // 4}")]
    return [(1, "fwd", pb.COMP_NODE, [], 10 if r < 4 else 150, []),
            (2, "dp_allreduce", pb.COMM_COLL_NODE, [1], 0, group),
            (3, "world_allreduce", pb.COMM_COLL_NODE, [2], 0, _coll(pb.ALL_REDUCE, 64 << 10))]


def test_collectives_over_process_groups_replay_on_their_ranks_as_they_run_alone(tmp_path, no_leftovers):
    """Collectives named by a process group run on its ranks only, each group's as it runs alone on those
    hosts (within 1 %: nothing else crosses the fabric meanwhile); the world allreduce waits for every
    rank; both cores agree; a trace whose groups are not given, or given wrong, is one line."""
    import json

    from emu import FabricNet, FPFTopo
    from emu.collectives.trace import TraceError, read

    prefix = write_trace(str(tmp_path / "dp"), _grouped)
    out = {}
    for core in ("native", "python"):
        with FabricNet(FPFTopo(gpus=N, planes=2), settings=RunSettings(clock="fabric", kernel=False, core=core)) as net:
            out[core] = net.replay(prefix, groups=DP)
            if core == "native":
                alone = [net.collective("allreduce", sizes=[256 << 10], hosts=[f"gpu{r}" for r in DP[g]]).rows[0].time_us
                         for g in ("dp0", "dp1")]
    r = out["native"]
    assert {k: v for k, v in r.items() if k != "fidelity"} == {k: v for k, v in out["python"].items() if k != "fidelity"}
    world, dp0, dp1 = r["collectives"]  # every rank's first, then the groups by their ranks
    assert "ranks" not in world and dp0["ranks"] == DP["dp0"] and dp1["ranks"] == DP["dp1"] and r["wrong"] == 0
    assert dp0["start_us"] == pytest.approx(10.0) and dp1["start_us"] == pytest.approx(150.0)
    assert [dp0["time_us"], dp1["time_us"]] == pytest.approx(alone, rel=0.01), (dp0, dp1, alone)
    assert world["start_us"] == pytest.approx(dp1["start_us"] + dp1["time_us"])
    with pytest.raises(TraceError, match="process group 'dp0', whose ranks are not given .--groups FILE"):
        read(prefix)
    with pytest.raises(TraceError, match="rank 4 is not in process group 'dp1' \\[0, 1, 2, 3\\]"):
        read(prefix, {"dp0": [0, 1, 2, 3], "dp1": [0, 1, 2, 3]})
    with pytest.raises(TraceError, match="process group 'dp1': give two or more distinct ranks of 0 to 7"):
        read(prefix, {"dp0": [0, 1, 2, 3], "dp1": [4, 4, 9]})
    (tmp_path / "groups.json").write_text(json.dumps(DP))
    cli = subprocess.run([sys.executable, "-m", "emu.cli.main", "replay", prefix, "--gpus", "8", "--planes", "2",
                          "--groups", str(tmp_path / "groups.json"), "--no-plot", "--out", str(tmp_path / "res")],
                         capture_output=True, text=True)
    assert cli.returncode == 0 and "collective 2: allreduce of 262144 B on ranks 4, 5, 6, 7" in cli.stdout, cli.stderr
    bad = subprocess.run([sys.executable, "-m", "emu.cli.main", "replay", prefix, "--gpus", "8",
                          "--groups", str(tmp_path / "none.json")], capture_output=True, text=True)
    assert bad.returncode == 1 and "--groups" in bad.stderr and "Traceback" not in bad.stderr


def _generate(tmp_path) -> str:
    """Chakra's own generator (its console script, beside this Python): one trace per node kind."""
    tool = os.path.join(os.path.dirname(sys.executable), "chakra_generator")
    subprocess.run([tool, "--num_npus", str(N), "--default_comm_size", "65536", "--default_runtime", "7"],
                   cwd=tmp_path, check=True, capture_output=True)
    return str(tmp_path)


def test_traces_from_chakras_generator_replay_or_are_refused_by_name(tmp_path, no_leftovers):
    from emu import FabricNet, FPFTopo
    from emu.collectives.trace import TraceError, read

    where = _generate(tmp_path)
    with FabricNet(FPFTopo(gpus=N, planes=2), clock="fabric", kernel=False) as net:
        allreduce = net.replay(f"{where}/ALL_REDUCE")
        alone = net.collective("allreduce", sizes=[65536]).rows[0].time_us
        comp = net.replay(f"{where}/two_comp_nodes_dependent")
        barrier = net.replay(f"{where}/BARRIER")
        tree = net.replay(f"{where}/ALL_REDUCE", algo="tree")
        with pytest.raises(ValueError, match="not auto"):
            net.replay(f"{where}/ALL_REDUCE", algo="auto")
    assert allreduce["step_time_us"] == pytest.approx(alone, rel=0.01) and allreduce["wrong"] == 0
    assert comp["step_time_us"] == pytest.approx(14.0) and comp["exposed_comm_us"] == pytest.approx(0.0, abs=1e-6)
    assert barrier["collectives"][0]["op"] == "allreduce" and barrier["wrong"] == 0
    assert tree["algo"] == "tree" and tree["wrong"] == 0 and tree["step_time_us"] != allreduce["step_time_us"]
    # The generator's sends name no peer (as Chakra's PyTorch converter's): refused, naming the node.
    with pytest.raises(TraceError, match="one_comm_send_node.0.et: node [0-9]+ \\(COMM_SEND_NODE\\): COMM_SEND_NODE "
                                         "without comm_dst"):
        read(f"{where}/one_comm_send_node")
    with pytest.raises(TraceError, match="BROADCAST is not replayed"):
        read(f"{where}/BROADCAST")


def test_a_bad_trace_is_one_clear_line_and_leaves_nothing(tmp_path, no_leftovers):
    from emu.collectives.trace import TraceError, read

    (tmp_path / "junk.0.et").write_bytes(b"\x05hello world, not protobuf")
    (tmp_path / "junk.1.et").write_bytes(b"")
    with pytest.raises(TraceError, match="junk.0.et: not a Chakra trace|junk.1.et: empty"):
        read(str(tmp_path / "junk"))
    prefix = write_trace(str(tmp_path / "gap"), _step)
    os.unlink(f"{prefix}.3.et")
    with pytest.raises(TraceError, match="no file for rank 3"):
        read(prefix)

    def mismatched(r: int) -> list:
        nodes = _step(r)
        return nodes if r else [n if n[0] != 5 else (5, "param_allgather", pb.COMM_COLL_NODE, [4], 0,
                                                    _coll(pb.ALL_GATHER, 128 << 10)) for n in nodes]
    with pytest.raises(TraceError, match="rank 1's collective 1 is allgather of 262144 B, rank 0's allgather of 131072"):
        read(write_trace(str(tmp_path / "odd"), mismatched))
    out = subprocess.run([sys.executable, "-m", "emu.cli.main", "replay", str(tmp_path / "nothing"), "--gpus", "8"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "no Chakra trace at" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "emu.cli.main", "replay", prefix.replace("gap", "odd"), "--gpus", "4",
                          "--out", str(tmp_path / "res")], capture_output=True, text=True)
    assert out.returncode == 1 and "rank 1's collective 1" in out.stderr and not (tmp_path / "res").exists()


def test_emu_replay_prints_the_step_and_writes_its_json_and_timeline(tmp_path, no_leftovers):
    prefix = write_trace(str(tmp_path / "step"), _step)
    out = subprocess.run([sys.executable, "-m", "emu.cli.main", "replay", prefix, "--gpus", "8", "--planes", "2",
                          "--out", str(tmp_path / "res")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "8 ranks on fpf, step" in out.stdout and "collective 0: allreduce of 1048576 B" in out.stdout
    assert (tmp_path / "res" / "replay-step.json").exists() and (tmp_path / "res" / "replay-step.png").stat().st_size
    too_few = subprocess.run([sys.executable, "-m", "emu.cli.main", "replay", prefix, "--gpus", "4"],
                             capture_output=True, text=True)
    assert too_few.returncode == 1 and "the trace has 8 ranks and this fabric 4 hosts" in too_few.stderr
