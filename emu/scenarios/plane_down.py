"""Plane down: one FPF plane fails under load; the other planes carry on.

GPU 0 streams to GPU 1 on every plane at line rate (one flow per plane, as
a NIC spraying over its ports would). Part-way through, every switch of one
plane fails. The receiver's per-plane byte counts and rates over time show
the failed plane stop and the others deliver everything, undisturbed.
Steering the failed plane's share onto the others is the host transport's
job (MetaRoCE); kernel UDP, as here, simply loses that plane's bytes.
"""

from __future__ import annotations

import time
from typing import Any

from emu.net.fidelity import fabric_fidelity
from emu.net.switch import RunSettings
from emu.scenarios.common import (
    Flow,
    ScenarioError,
    Traffic,
    fabric,
    int_param,
    only,
    rate_param,
    save,
    size_param,
)
from emu.topo.fpf import FPFTopo

DEFAULT_DILATION = 10000.0
PORT = 9200


def load_pps(params: dict[str, str]) -> float:
    """One line-rate flow per plane (for --dilation auto)."""
    return int_param(params, "planes", 4, "plane-down") * rate_param(params, "rate", "100G", "plane-down") / (1442 * 8)


def run(params: dict[str, str], settings: RunSettings, out_dir: str) -> dict[str, Any]:
    only(params, {"planes", "bytes", "rate", "fail", "at"}, "plane-down")
    planes = int_param(params, "planes", 4, "plane-down")
    failed = int_param(params, "fail", 1, "plane-down")
    nbytes = size_param(params, "bytes", "1MiB", "plane-down")
    rate = rate_param(params, "rate", "100G", "plane-down")
    at = float(params.get("at", 0.4))
    if not 0 <= failed < planes or planes < 2:
        raise ScenarioError(f"plane-down: needs 2+ planes and a failed plane in 0..{planes - 1}")
    if not 0 < at < 1:
        raise ScenarioError("plane-down: `at` is the fraction of the transfer at which the plane fails, in (0, 1)")
    with fabric(FPFTopo(gpus=2, planes=planes, leaves=1, rate=f"{rate:g}"), settings) as net:
        flows = [Flow("gpu0", "gpu1", f"10.{p}.0.3", PORT, nbytes, rate) for p in range(planes)]
        traffic = Traffic(net, flows, dilation=settings.dilation)
        net.wait_forwarded(f"p{failed}l0", int(at * nbytes))  # `at` into the failed plane's flow
        net.fail(plane=failed)
        failed_at = time.monotonic()
        sent, got = traffic.wait()
        stats = net.engine.stats()
    rx = got[("gpu1", PORT, False)]
    by_plane = {p: rx["by_source"].get(f"10.{p}.0.2", 0) for p in range(planes)}
    offered = {p: s["sent_bytes"] for p, s in enumerate(sent)}
    bin_s = rx["bin_s"]
    fail_after = failed_at - rx["first_monotonic"]  # one system-wide monotonic clock in every namespace
    after = {p: sum(v for k, v in rx["bins"].get(f"10.{p}.0.2", {}).items() if int(k) * bin_s > fail_after)
             for p in range(planes)}
    others = [p for p in range(planes) if p != failed]
    result = {
        "scenario": "plane-down",
        "dilation": settings.dilation,
        "planes": planes,
        "failed_plane": failed,
        "failed_at_fabric_s": fail_after / settings.dilation,
        "offered_bytes_by_plane": offered,
        "delivered_bytes_by_plane": by_plane,
        "delivered_after_failure_by_plane": after,
        "others_complete": all(by_plane[p] == offered[p] for p in others),
        "failed_plane_lost_bytes": offered[failed] - by_plane[failed],
        "fidelity": fabric_fidelity(stats, rate_bps=rate, senders=sent),
    }
    result["passed"] = result["others_complete"] and result["failed_plane_lost_bytes"] > 0 and all(
        after[p] > 0 for p in others)

    def draw(ax: Any) -> None:
        for p in range(planes):
            bins = rx["bins"].get(f"10.{p}.0.2", {})
            ks = sorted(int(k) for k in bins)
            ax.plot([k * bin_s / settings.dilation * 1e6 for k in ks],
                    [bins[str(k)] * 8 / bin_s * settings.dilation / 1e9 for k in ks],
                    label=f"plane {p}" + (" (failed)" if p == failed else ""), linewidth=1)
        ax.axvline(fail_after / settings.dilation * 1e6, color="k", linestyle="--", linewidth=0.8)
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("received (Gb/s)")
        ax.set_title(f"FPF plane {failed} fails under load (D={settings.dilation:g})")
        ax.legend(fontsize=8)

    return save(out_dir, "plane-down", result, draw)
