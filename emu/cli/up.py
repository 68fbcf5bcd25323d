"""`emu up`: one fabric, interactive or headless, and proof that nothing was left behind."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import asdict

from mininet.log import setLogLevel
from rich.console import Console

from emu.cli.mncli import FabricCLI
from emu.fidelity import fabric_fidelity, line
from emu.net.cleanup import root_interfaces, worker_pids
from emu.net.fabric import FabricNet
from emu.net.link import ChannelIntf, FabricLink
from emu.net.switch import RunSettings
from emu.topo import make_topo


def leftovers(interfaces: set[str], pids: list[int], run_dir: str) -> list[str]:
    """What a stopped fabric still holds: its interfaces, its node shells, its engine workers and BMv2
    switches (not another live run's: two fabrics may run side by side)."""
    out = sorted(interfaces & set(root_interfaces()))
    out += [f"pid {p}" for p in pids if os.path.exists(f"/proc/{p}")]
    out += [f"worker pid {p}" for p in worker_pids(only_run=run_dir)]
    return out


def drops_by_reason(stats: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for sw in stats["switches"].values():
        for port in sw["ports"].values():
            for reason, n in port.get("drops", {}).items():  # BMv2 counts no drops by reason
                out[reason] = out.get(reason, 0) + n
    return out


def link_kinds(net: FabricNet) -> dict[str, int]:
    """How many links of each rate and propagation delay the fabric was built with: what the
    topology options asked for, as the engine carries it ("100G 10ns": 16)."""
    kinds = Counter(f"{link.fabric.rate_bps / 1e9:g}G {link.fabric.delay_s * 1e9:.4g}ns"
                    for link in net.links if isinstance(link, FabricLink))
    return dict(sorted(kinds.items()))


def web_address(text: str) -> tuple[str, int]:
    """`--web [ADDR:]PORT` -> (address, port); 127.0.0.1 unless an address is given."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--web: give [ADDR:]PORT, a port 0..65535, not {text!r}")
    return host, int(port)


def up(name: str, params: dict[str, str], settings: RunSettings, *, test: str | None, as_json: bool,
       web: str | None = None, web_control: bool = False, record: str | None = None) -> int:
    console = Console(stderr=as_json)
    topo = make_topo(name, params)  # validated: nothing exists yet if this fails
    where = web_address(web) if web else None
    if web_control and where is None:
        raise ValueError("--web-control goes with --web [ADDR:]PORT")
    if record:
        from emu.web.app import check_recording_path

        check_recording_path(record)
    setLogLevel("info" if test is None else "warning")
    t0 = time.monotonic()
    net = None
    result: dict = {"topology": name, "params": params, "dilation": settings.dilation, "settings": asdict(settings)}
    passed = True
    try:
        with console.status(f"building {name} ({len(topo.switches())} switches, {len(topo.hosts())} hosts)"):
            net = FabricNet(topo, settings=settings)
            net.start()
        result["up_s"] = round(time.monotonic() - t0, 3)
        result["links"] = link_kinds(net)
        if record:
            net.record(record)
            result["recording"] = record
        if where is not None:
            result["web"] = net.web(port=where[1], host=where[0], control=web_control).url
            console.print(f"live view: {result['web']}", markup=False, highlight=False)
        if test is None:
            console.print(f"[green]{name} is up[/green] in {result['up_s']} s at D={settings.dilation:g}; "
                          "extra commands: stats, fail, restore, pingplanes, run")
            FabricCLI(net)
        elif test == "pingall":
            with console.status("pinging every host on every plane (IPv4 and IPv6)"):
                r4 = net.pingall_planes(4)
                r6 = net.pingall_planes(6)
            result["pingall"] = {"ipv4_loss_pct": r4.loss, "ipv6_loss_pct": r6.loss,
                                 "sent": r4.sent + r6.sent, "received": r4.received + r6.received,
                                 "retried": r4.retried + r6.retried,
                                 "failed": [f"{a}->{b}" for a, b in (r4.failed + r6.failed)[:20]]}
            passed = r4.loss == 0 and r6.loss == 0
            stats = net.engine.stats()
            result["fidelity"] = fabric_fidelity(stats)
            result["drops"] = drops_by_reason(stats)
    finally:
        if net is not None:
            here = [n for n in net.hosts + net.switches if not getattr(n, "isRemote", False)]  # this machine's
            ifs = {i.name for n in here for i in n.intfList() if i.name != "lo" and not isinstance(i, ChannelIntf)}
            pids = [n.pid for n in here]
            run_dir = getattr(net, "run_dir", "")
            t1 = time.monotonic()
            net.stop()
            result["down_s"] = round(time.monotonic() - t1, 3)
            left = leftovers(ifs, pids, run_dir)
            result["left_behind"] = left
            passed = passed and not left
    result["passed"] = passed
    if test is not None:
        if as_json:
            print(json.dumps(result))
        else:
            ping = result.get("pingall")
            if ping:
                console.print(f"pingall: IPv4 {ping['ipv4_loss_pct']:.1f}% loss, IPv6 {ping['ipv6_loss_pct']:.1f}% "
                              f"loss ({ping['received']}/{ping['sent']} replies, {ping['retried']} needed a second try)")
            if "fidelity" in result:
                # Reachability is exact whatever the timing; the verdict is about the RTTs at this D.
                console.print("reachability is exact; the ping times' " + line(result["fidelity"]), markup=False,
                              highlight=False)
            console.print(f"up {result['up_s']} s, down {result['down_s']} s, left behind: "
                          f"{', '.join(result['left_behind']) or 'nothing'}")
            console.print("[green]PASSED[/green]" if passed else "[red]FAILED[/red]")
    return 0 if passed else 1
