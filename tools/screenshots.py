"""The live view's screenshots in README.md and docs/web.md, made the same way every time (root, Chromium):

    sudo .venv/bin/python tools/screenshots.py docs/img

web-fpf-8x8-incast.png: FPF 8 GPUs x 8 planes while seven GPUs send 1 MiB each to gpu0 on plane 0
(lossless class), taken once PFC's pause arrows are drawn. web-congestion-spreading.png: the
congestion-spreading scenario's PFC fabric while its incast and victim writes run (the scenario's own
measure(), on a fabric with the page open), taken once the pause tree reaches beyond the incast's
switches. Both on the fabric clock, paced so that a fabric microsecond takes 8 ms of wall time (the
figures do not change), in a 1280 x 720 window (headless Chromium's page in it, so each image, is
1280 x 577).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from emu import FabricNet, FPFTopo
from emu.net.flows import EngineFlows, Flow
from emu.net.switch import RunSettings
from emu.scenarios.common import DSCP_LOSSLESS, ECT0
from emu.scenarios.congestion_spreading import CongestionSpreading
from emu.web.devtools import Browser

PACE = 8000.0  # wall seconds per fabric second while a shot's traffic runs
ARROWS = "document.querySelectorAll('line.pauses-a, line.pauses-b').length"


def _shoot_while(net: FabricNet, page: Browser, run: Any, path: str, arrows: int) -> None:
    """Run `run()` in a thread, paced; the screenshot once `arrows` pause arrows are drawn (or, failing
    that, at the run's end, said)."""
    net.pace(PACE)
    failed: list[BaseException] = []

    def go() -> None:
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 -- said below, on this thread
            failed.append(exc)

    worker = threading.Thread(target=go)
    worker.start()
    taken = False
    while worker.is_alive():
        if not taken and page.js(ARROWS) >= arrows:
            time.sleep(0.3)  # one more snapshot: the colours of the same instant
            page.screenshot(path)
            taken = True
        time.sleep(0.05)
    worker.join()
    net.pace(0.0)
    if failed:
        raise failed[0]
    if not taken:
        page.screenshot(path)
        print(f"{path}: fewer than {arrows} pause arrows were drawn; taken at the end", file=sys.stderr)


def incast(out: str) -> str:
    path = os.path.join(out, "web-fpf-8x8-incast.png")
    with FabricNet(FPFTopo(gpus=8, planes=8), clock="fabric", kernel=False) as net, \
            Browser(net.web().url, width=1280, height=720) as page:
        page.wait_for("Number(document.body.dataset.snapshots || 0) >= 2", 30)
        dst = net.get("gpu0").IP()
        flows = [Flow(f"gpu{i}", "gpu0", dst, 9000, 1 << 20, 100e9, tos=DSCP_LOSSLESS << 2 | ECT0) for i in range(1, 8)]
        _shoot_while(net, page, lambda: EngineFlows(net, flows).wait(), path, arrows=3)
    return path


def congestion_spreading(out: str) -> str:
    path = os.path.join(out, "web-congestion-spreading.png")
    scenario = CongestionSpreading()
    settings = scenario.role_settings("pfc", scenario.settings(RunSettings(clock="fabric", kernel=False)))
    with FabricNet(scenario.topologies()["pfc"], settings=settings) as net, \
            Browser(net.web().url, width=1280, height=720) as page:
        page.wait_for("Number(document.body.dataset.snapshots || 0) >= 2", 30)
        _shoot_while(net, page, lambda: scenario.measure(net, settings, "pfc"), path, arrows=4)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    os.makedirs(argv[0], exist_ok=True)
    for shot in (incast, congestion_spreading):
        print(shot(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
