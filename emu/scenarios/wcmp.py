"""Weighted ECMP over unequal BAG paths, and damping when a long-haul link flaps.

Region 0 reaches region 1 over four long-haul links, two of 400G and two of
100G. Next hops are weighted by the capacity they can carry to the
destination (link bandwidth, cumulative), so traffic hashed over many flows
should split 40/10/40/10 %, not 25 % each. Each link's share of the bytes is
read from the BAG switches' port counters and set against the share the
cumulative-bandwidth rule gives it, computed here from the link rates alone:
a BAG switch gets the smaller of what feeds it (its spine links) and what
it can pass on (its live long-haul links), and splits that over its
long-haul links by rate. After a 400G link fails the split is 20/64/16 %,
not 1/6, 2/3, 1/6: the 400G spine link into the other BAG switch caps it. Then a 400G link flaps (down, up, down) faster than the damping
hold-down: without damping every change is a round of route updates; with
it the flap is folded into one. Route updates are counted by the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from emu.control.runtime import ControlTiming
from emu.net.fabric import FabricNet
from emu.net.flows import Flow
from emu.net.switch import RunSettings
from emu.scenarios.base import Scenario
from emu.scenarios.common import HEADERS, ScenarioError, legend_below, totals
from emu.topo.bag import BAGTopo

PORT = 9500
DETECTION_S = 50e-6
HOLD_DOWN_S = 1e-3  # longer than the flap (three changes, 3 x DETECTION_S apart), as in the wcmp lab


def _long_haul_ports(net: FabricNet) -> dict[str, tuple[str, str, float]]:
    """'bag0xA-bag1xB' -> (switch, region-0 port, capacity)."""
    out = {}
    for link in net.links:
        a, b = link.intf1, link.intf2
        if a.node.name.startswith("bag0") and b.node.name.startswith("bag1"):
            out[f"{a.node.name}-{b.node.name}"] = (a.node.name, a.name, link.fabric.rate_bps)
        elif b.node.name.startswith("bag0") and a.node.name.startswith("bag1"):
            out[f"{b.node.name}-{a.node.name}"] = (b.node.name, b.name, link.fabric.rate_bps)
    return out


def _expected_shares(net: FabricNet, up: set[str]) -> dict[str, float]:
    """Each live long-haul link's share under cumulative link bandwidth, from the link rates alone (not
    from the controller's weights, which are what is under test)."""
    long_haul = _long_haul_ports(net)
    feed: dict[str, float] = {}  # region-0 BAG switch -> rate of the spine links into it
    for link in net.links:
        ends = {link.intf1.node.name, link.intf2.node.name}
        bag = next((n for n in ends if n.startswith("bag0")), None)
        if bag and not any(n.startswith("bag") for n in ends - {bag}):
            feed[bag] = feed.get(bag, 0.0) + link.fabric.rate_bps
    out_rate: dict[str, float] = {}
    for k, (sw, _, rate) in long_haul.items():
        out_rate[sw] = out_rate.get(sw, 0.0) + (rate if k in up else 0.0)
    usable = {sw: min(feed.get(sw, 0.0), out_rate.get(sw, 0.0)) for sw in out_rate}
    total = sum(usable.values()) or 1.0
    return {k: (usable[sw] / total * rate / out_rate[sw] if k in up and out_rate[sw] else 0.0)
            for k, (sw, _, rate) in long_haul.items()}


def _shares(net: FabricNet, flow: Flow) -> dict[str, Any]:
    """Each long-haul link's share of the bytes against the share it should carry, and what arrived of
    what the flow was to send (a split that loses is no split)."""
    ports = _long_haul_ports(net)
    before = net.engine.stats()
    traffic = net.traffic([flow])
    _, got = traffic.wait()
    after = net.engine.stats()
    was, now = totals(before)["drops_by_reason"], totals(after)["drops_by_reason"]
    moved = {k: after["switches"][sw]["ports"][p]["tx_bytes"] - before["switches"][sw]["ports"][p]["tx_bytes"]
             for k, (sw, p, _) in ports.items()}
    expected = _expected_shares(net, {k for k, (sw, p, _) in ports.items()
                                      if after["switches"][sw]["ports"][p]["up"]})
    total_b = sum(moved.values()) or 1
    paths = {k: {"bytes": moved[k], "byte_share": moved[k] / total_b, "expected_share": expected[k]}
             for k in sorted(ports)}
    return {"paths": paths, "max_share_error": max(abs(v["byte_share"] - v["expected_share"]) for v in paths.values()),
            "planned_bytes": flow.wire_bytes, "delivered_bytes": got[(flow.dst, flow.port, False)]["received_bytes"],
            # where a loss happened, if any (a split that loses is no split)
            "drops_by_reason": {r: n - was.get(r, 0) for r, n in now.items() if n > was.get(r, 0)},
            "kernel_frames": traffic.kernel_frames}


def _flap(net: FabricNet, timing: ControlTiming) -> dict[str, int]:
    control = net.control
    control.timing = timing
    u0, r0 = control.updates, control.recomputes
    for up in (False, True, False):
        net.fail(link=("bag0x0", "bag1x0")) if not up else net.restore(link=("bag0x0", "bag1x0"))
        net.timebase.sleep(3 * DETECTION_S)  # the control plane's fabric time
    control.settle()
    out = {"route_updates": control.updates - u0, "recomputes": control.recomputes - r0}
    control.timing = ControlTiming(detection_s=0.0)
    net.restore(link=("bag0x0", "bag1x0"))
    control.settle()
    return out


@dataclass
class Wcmp(Scenario):
    """A 300G flow hashed over `flows` source ports, `bytes` in all, from region 0 to region 1 over two
    400G and two 100G long-haul links; a 400G link then flaps, without and with damping, and fails."""

    name = "wcmp"
    headline = (
        "max_share_error", "after_failure_of_bag0x0-bag1x0.max_share_error", "delivered_bytes", "planned_bytes",
        "flap_with_damping.route_updates", "flap_without_damping.route_updates")
    # The shares are measured by the engine's own UDP flows (exact); the flaps happen between them, with
    # the controller's timers on fabric time that follows the wall at 1/D while no job runs.
    fabric_clock = True
    default_dilation = 1000.0

    flows: int = 512
    bytes: str = "2MiB"

    def check(self) -> None:
        if self.flows < 1:
            raise ScenarioError(f"wcmp: flows must be at least 1, got {self.flows}")
        self.as_size("bytes")

    def load_pps(self) -> float:
        """The 300G flow, in 1400-byte datagrams."""
        return 300e9 / (1442 * 8)

    def settings(self, settings: RunSettings) -> RunSettings:
        return replace(settings, control=ControlTiming(detection_s=DETECTION_S))

    def topology(self) -> BAGTopo:
        return BAGTopo(regions=2, buildings=1, leaves=1, spines=1, hosts_per_leaf=1, bags=2, rate="400G",
                       fabric_rate="400G", bag_rates="400G,100G", distance="10km")

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        flow = Flow("h000x0", "h100x0", net.get("h100x0").IP(), PORT, self.as_size("bytes"), 300e9, flows=self.flows)
        shares = _shares(net, flow)
        plain = _flap(net, ControlTiming(detection_s=DETECTION_S))
        damped = _flap(net, ControlTiming(detection_s=DETECTION_S, hold_down_s=HOLD_DOWN_S))
        net.fail(link=("bag0x0", "bag1x0"))
        net.control.settle()
        shares_failed = _shares(net, flow)
        return {
            "flows": self.flows,
            "paths": shares["paths"],
            "max_share_error": shares["max_share_error"],
            "planned_bytes": shares["planned_bytes"],
            "delivered_bytes": shares["delivered_bytes"],
            "drops_by_reason": shares["drops_by_reason"],
            "after_failure_of_bag0x0-bag1x0": shares_failed,
            "flap_without_damping": plain,
            "flap_with_damping": {**damped, "hold_down_fabric_s": HOLD_DOWN_S},
            "detection_fabric_s": DETECTION_S,
            "fidelity": net.verdict(rate_bps=400e9, frame_bytes=1400 + HEADERS,
                                    kernel_frames=shares["kernel_frames"] + shares_failed["kernel_frames"]),
        }

    def verdict(self, result: dict[str, Any]) -> bool:
        """Each link's share within 0.1 of the rule's, before and after the failure, everything
        delivered, and damping folded the flap into fewer route updates."""
        failed = result["after_failure_of_bag0x0-bag1x0"]
        return (result["max_share_error"] < 0.1 and failed["max_share_error"] < 0.1
                and result["delivered_bytes"] == result["planned_bytes"]
                and failed["delivered_bytes"] == failed["planned_bytes"]
                and result["flap_with_damping"]["route_updates"] < result["flap_without_damping"]["route_updates"])

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        paths = result["paths"]
        names = list(paths)
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [paths[n]["expected_share"] for n in names], 0.4, label="expected share")
        ax.bar([x + 0.2 for x in xs], [paths[n]["byte_share"] for n in names], 0.4, label="byte share")
        ax.set_xticks(list(xs), names, fontsize=8)
        ax.set_ylabel("share")
        ax.set_title(f"WCMP over unequal BAG links; flap: {result['flap_without_damping']['route_updates']} route "
                     f"updates, {result['flap_with_damping']['route_updates']} damped", fontsize=9)
        legend_below(ax)
