"""A plane fails under a MetaRoCE transfer: the host steers around it.

GPU 0 writes to GPU 1 sprayed over every plane. Part-way through, every
switch of one plane fails. The sender sees that plane's packets go
unacknowledged, retransmits them on the others, stops giving it new packets,
and keeps probing it; the transfer completes with the right data. The plot
shows bytes sent per plane over time, from the sender's own samples.
"""

from __future__ import annotations

import time
from typing import Any

from emu.net.fidelity import fabric_fidelity
from emu.net.switch import RunSettings
from emu.roce.run import PerfRun, mininet_popen
from emu.roce.transport import HEADERS
from emu.scenarios.common import ScenarioError, fabric, int_param, only, save, size_param
from emu.topo.fpf import FPFTopo

DEFAULT_DILATION = 10000.0


def load_pps(params: dict[str, str]) -> float:
    """One MetaRoCE writer spraying 100G planes (for --dilation auto)."""
    return int_param(params, "planes", 4, "roce-plane-down") * 100e9 / ((1024 + HEADERS) * 8)


def run(params: dict[str, str], settings: RunSettings, out_dir: str) -> dict[str, Any]:
    only(params, {"planes", "bytes", "fail"}, "roce-plane-down")
    planes = int_param(params, "planes", 4, "roce-plane-down")
    failed = int_param(params, "fail", 2, "roce-plane-down")
    nbytes = size_param(params, "bytes", "16MiB", "roce-plane-down")
    if planes < 2 or not 0 <= failed < planes:
        raise ScenarioError(f"roce-plane-down: needs 2+ planes and a failed plane in 0..{planes - 1}")
    with fabric(FPFTopo(gpus=2, planes=planes, leaves=1), settings) as net:
        run_ = PerfRun(mininet_popen(net.get("gpu0")), mininet_popen(net.get("gpu1")), nbytes=nbytes,
                       dilation=settings.dilation, lat_iters=0)
        net.wait_forwarded(f"p{failed}l0", int(0.4 * nbytes / planes))  # 40 % into the plane's share
        net.fail(plane=failed)
        failed_at = time.monotonic() / settings.dilation
        client, server = run_.wait()
        stats = net.engine.stats()
    p = client["planes"][failed]
    result = {
        "scenario": "roce-plane-down",
        "dilation": settings.dilation,
        "planes": planes,
        "failed_plane": failed,
        "data_ok": server["data_ok"],
        "bw_fabric_bps": client["bw_fabric_bps"],
        "retransmits": client["retransmits"],
        "failed_plane_marked_down": not p["healthy"],
        "data_packets_on_failed_plane_after_detection": p["tx_after_down"],
        "probes_on_failed_plane": p["probes"],
        "bytes_by_plane": [q["tx_bytes"] for q in client["planes"]],
        "fidelity": fabric_fidelity(stats, frame_bytes=1024 + HEADERS, endpoints=[client, server]),
    }
    result["passed"] = server["data_ok"] and not p["healthy"] and p["tx_after_down"] == 0
    trace = client["plane_trace"]

    def draw(ax: Any) -> None:
        if len(trace) < 2:
            return
        origin = trace[0][0]
        for k in range(planes):
            xs, ys = [], []
            for (t0, b0), (t1, b1) in zip(trace, trace[1:], strict=False):
                if t1 > t0:
                    xs.append((t1 - origin) * 1e6)
                    ys.append((b1[k] - b0[k]) * 8 / (t1 - t0) / 1e9)
            ax.plot(xs, ys, linewidth=1, label=f"plane {k}" + (" (fails)" if k == failed else ""))
        ax.axvline((failed_at - origin) * 1e6, color="k", linestyle="--", linewidth=0.8)
        ax.set_xlabel("fabric time (us)")
        ax.set_ylabel("sent on plane (Gb/s)")
        ax.set_title(f"MetaRoCE steers around failed plane {failed} (D={settings.dilation:g})")
        ax.legend(fontsize=8)

    return save(out_dir, "roce-plane-down", result, draw)
