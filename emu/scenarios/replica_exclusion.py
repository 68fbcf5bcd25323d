"""Replica exclusion: a data-parallel replica dies mid-step and the others go on over BAG.

"When a replica fails, it is automatically excluded and the surviving
replicas continue synchronizing across BAG" (the seeds). `replicas`
replicas, one in each building of two BAG regions `distance` apart, each
step allreduce `size` bytes over MetaRoCE (emu.collectives.elastic). First
the steps run clean, for the step time; then the same run again, in which
replica `fail`'s host dies half-way through step `fail_step`. The survivors
detect it (the transport's retry limit, kept alive by heartbeats), agree on a
new view (a two-phase view change by the lowest-ranked survivor), redo the
interrupted step among themselves and finish every step, checked element by
element. Everything runs inside the engine on the fabric clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.collectives.elastic import RETRY_LIMIT, ReplicasJob
from emu.collectives.rank import SLICE
from emu.collectives.run import transport_for
from emu.dataplane.engine import EngineError
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.roce.transport import HEADERS, RTO_S
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below
from emu.topo.bag import BAGTopo
from emu.units import FIBRE_S_PER_M

MTU = 1024


@dataclass
class ReplicaExclusion(Scenario):
    """`replicas` replicas in the buildings of two BAG regions `distance` apart allreduce `size` bytes
    each of `steps` steps; replica `fail` dies half-way through step `fail_step`. `retry_limit` timer
    retransmissions make a peer dead to the transport (0: never, the control that shows detection
    is what saves the run); `heartbeat` between members."""

    name = "replica-exclusion"
    headline = (
        "survivors", "survivors_agree", "steps_completed", "wrong", "time_to_detect_fabric_s",
        "time_to_resume_fabric_s")
    fabric_clock = True  # all its traffic is MetaRoCE's: the engine runs it, exactly
    wall_clock = False  # its endpoints (many pairs at once, replicas) are written for the fabric clock's jobs

    replicas: int = 4
    size: str = "1MiB"
    steps: int = 4
    fail: int = 2
    fail_step: int = 1
    distance: str = "20km"
    retry_limit: int = RETRY_LIMIT
    heartbeat: str = "20us"

    def check(self) -> None:
        if not 4 <= self.replicas <= 16 or self.replicas % 2:
            raise ScenarioError("replica-exclusion: replicas must be even, 4..16 (half in each of two regions)")
        if not 0 <= self.fail < self.replicas or not 0 <= self.fail_step < self.steps or self.steps > 64:
            raise ScenarioError(f"replica-exclusion: fail must be 0..{self.replicas - 1}, fail_step 0..{self.steps - 1}, "
                                "steps at most 64")
        if not 0 <= self.retry_limit <= 7:
            raise ScenarioError("replica-exclusion: retry_limit is 0..7 (RoCE's retry_cnt; 0: never give up)")
        if self.as_size("size") < 4 * self.replicas * 4 or self.as_time("heartbeat") <= 0:
            raise ScenarioError("replica-exclusion: size must hold a few int32 per replica, heartbeat > 0")

    @property
    def bytes_per_step(self) -> int:
        """`size` rounded down to whole int32 chunks for every member both before and after the exclusion."""
        grain = 4 * self.replicas * (self.replicas - 1)
        return self.as_size("size") // grain * grain

    def load_pps(self) -> float:
        return self.replicas * 400e9 / ((MTU + HEADERS) * 8)

    def topology(self) -> BAGTopo:
        return BAGTopo(regions=2, buildings=self.replicas // 2, leaves=1, spines=1, hosts_per_leaf=1, bags=1,
                       distance=self.distance)

    def _run(self, net: FabricNet, *, fail: dict[str, Any] | None, budget_s: float) -> dict[str, Any]:
        hosts = net.rank_hosts()
        params = {"size": self.bytes_per_step, "steps": self.steps, "slice": SLICE, "mtu": MTU, "seed": 1,
                  "heartbeat_s": self.as_time("heartbeat"), "retry_limit": self.retry_limit or None,
                  "budget_s": budget_s, "fail": fail, "transport": transport_for(hosts),
                  "ranks": [{"name": h.name, "planes": [[sw, port, addr, rate] for (sw, port), (addr, rate)
                                                        in zip(h.switch_ports, h.ports, strict=True)]}
                            for h in hosts]}
        try:
            state = net.timebase.run_job(ReplicasJob, params)
        finally:
            for sw, port in (fail or {}).get("ports", []):
                net.engine.set_port(sw, port, True)
        return {**state["result"], "kernel_frames": int(state["kernel_frames"]), "hosts": [h.name for h in hosts]}

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        clean = self._run(net, fail=None, budget_s=1.0)
        step_s = step_times(clean["members"], 0)
        dead = net.rank_hosts()[self.fail]
        fail = {"rank": self.fail, "after_s": (self.fail_step + 0.5) * mean(step_s),
                "ports": [list(p) for p in dead.switch_ports]}
        # Room for the steps, the detection (the doubling timer's sum, at most RTO x 2^(limit+1), the RTO
        # four round trips across BAG at least) and the view change: past it, the survivors are stuck.
        rto = max(RTO_S, 8 * 2 * self.as_distance("distance") * FIBRE_S_PER_M)
        budget = 20 * self.steps * mean(step_s) + rto * 2 ** (self.retry_limit + 2) + 0.01
        try:
            run = self._run(net, fail=fail, budget_s=budget)
        except EngineError as exc:
            raise ScenarioError(f"replica-exclusion: the survivors did not finish: {exc}") from None
        return {"clean": clean, "run": run, "clean_step_s": step_s,
                "fidelity": net.verdict(rate_bps=400e9, frame_bytes=MTU + HEADERS,
                                        kernel_frames=clean["kernel_frames"] + run["kernel_frames"])}

    def summarise(self, parts: dict[str, dict[str, Any]], settings: RunSettings) -> dict[str, Any]:
        m = parts["fabric"]
        run, clean_steps = m["run"], m["clean_step_s"]
        members = run["members"]
        failed_at = run["failed_at_s"]
        ev = [x["events"] for x in members]
        detected = min((e["detected_s"] for e in ev if "detected_s" in e), default=None)
        committed = max((e["committed_s"] for e in ev if "committed_s" in e), default=None)
        after = step_times(members, 1)
        survivors = sorted(x["rank"] for x in members)
        views = {tuple(x["view"]) for x in members}
        redone = [s for x in members for s in x["steps"] if s["step"] == self.fail_step]
        return {
            "replicas": self.replicas, "hosts": run["hosts"], "dead": {"rank": self.fail, "host": run["hosts"][self.fail]},
            "distance": self.distance, "bytes_per_step": self.bytes_per_step, "steps": self.steps,
            "detection": f"transport retry limit {self.retry_limit} x RTO (4 measured round trips, at least "
                         f"{RTO_S * 1e6:g} us; doubling), "
                         f"heartbeats every {self.as_time('heartbeat') * 1e6:g} us to the ring's right neighbour",
            "agreement": "two-phase view change (PROPOSE, ACCEPT after draining, COMMIT) by the lowest-ranked survivor",
            "survivors": survivors,
            "survivors_agree": len(views) == 1 and list(next(iter(views))) == survivors,
            "epochs": sorted({x["epoch"] for x in members}),
            "detected_by": [x["rank"] for x in members if "detected_s" in x["events"]],
            "failed_at_fabric_s": failed_at - run["t0_s"],
            "time_to_detect_fabric_s": None if detected is None else detected - failed_at,
            "time_to_agree_fabric_s": None if detected is None or committed is None else committed - detected,
            "time_to_resume_fabric_s": None if committed is None else committed - failed_at,
            "interrupted_step_fabric_s": (max(s["end_s"] for s in redone) - min(e["aborted_start_s"] for e in ev
                                                                                 if "aborted_start_s" in e)
                                          if redone and any("aborted_start_s" in e for e in ev) else None),
            "step_before_fabric_s": mean(clean_steps),
            "step_after_fabric_s": mean(after) if after else None,
            "steps_completed": {str(x["rank"]): len(x["steps"]) for x in members},
            "wrong": sum(s["wrong"] for x in members for s in x["steps"]),
            "timeline": [{"rank": x["rank"], "steps": [[s["start_s"] - run["t0_s"], s["end_s"] - run["t0_s"], s["epoch"]]
                                                      for s in x["steps"]]} for x in members],
            "detected_at_fabric_s": None if detected is None else detected - run["t0_s"],
            "committed_at_fabric_s": None if committed is None else committed - run["t0_s"],
            "retransmits": sum(x["retransmits"] for x in members),
            "fidelity": m["fidelity"],
        }

    def verdict(self, result: dict[str, Any]) -> bool:
        """Every survivor finished every step with #wrong 0, they agree on the view without the dead
        replica, and the detection and resume times are known."""
        done = all(n == self.steps for n in result["steps_completed"].values())
        return (done and result["wrong"] == 0 and result["survivors_agree"]
                and self.fail not in result["survivors"] and result["time_to_detect_fabric_s"] is not None
                and result["time_to_resume_fabric_s"] is not None)

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        for row in result["timeline"]:
            for start, end, epoch in row["steps"]:
                ax.barh(row["rank"], (end - start) * 1e3, left=start * 1e3, height=0.5,
                        color="tab:blue" if epoch == 0 else "tab:green", edgecolor="k", linewidth=0.4)
        marks = (("failed_at_fabric_s", "dies", "tab:red"), ("detected_at_fabric_s", "detected", "tab:orange"),
                 ("committed_at_fabric_s", "new view", "tab:green"))
        for key, label, color in marks:
            if result.get(key) is not None:
                ax.axvline(result[key] * 1e3, color=color, linestyle="--", linewidth=0.8, label=label)
        ax.set_yticks(range(result["replicas"]))
        ax.set_yticklabels([f"replica {r} ({h})" for r, h in enumerate(result["hosts"])], fontsize=7)
        ax.set_xlabel("fabric time (ms)")
        detect = result["time_to_detect_fabric_s"]
        ax.set_title(f"replica {result['dead']['rank']} dies; survivors' steps (blue: {result['replicas']}-way, "
                     f"green: after exclusion)\n"
                     f"detected after {detect * 1e3 if detect is not None else float('nan'):.2f} ms, "
                     f"#wrong {result['wrong']}", fontsize=8)
        legend_below(ax)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def step_times(members: list[dict[str, Any]], epoch: int) -> list[float]:
    """Each step of `epoch` from its first member's start to its last member's end (fabric s)."""
    by: dict[int, list[dict[str, Any]]] = {}
    for x in members:
        for s in x["steps"]:
            if s["epoch"] == epoch:
                by.setdefault(s["step"], []).append(s)
    return [max(s["end_s"] for s in v) - min(s["start_s"] for s in v) for _, v in sorted(by.items())]
