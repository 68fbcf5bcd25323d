"""The live view (issue 25): its snapshots over the websocket, /metrics, the token, the address it binds."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from emu.web.app import make_app
from emu.web.scene import End, Link, Topology, layout

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"  # the screenshots are kept there, wherever pytest is started from


def fabric() -> tuple[Topology, list[dict]]:
    """Two hosts on one leaf of plane 0: links gpu0-p0l0 (port p0l0-eth0) and p0l0-gpu1 (p0l0-eth1)."""
    kinds = {"gpu0": "host", "gpu1": "host", "p0l0": "switch"}
    groups = {"gpu0": -1, "gpu1": -1, "p0l0": 0}
    edges = [("gpu0", "p0l0"), ("p0l0", "gpu1")]
    topo = Topology(layout(sorted(kinds), kinds, groups, edges),
                    [Link(0, End("gpu0", None, None), End("p0l0", "p0l0", "p0l0-eth0"), 100e9),
                     Link(1, End("p0l0", "p0l0", "p0l0-eth1"), End("gpu1", None, None), 100e9)], {"p0l0": 0})

    def port(tx: int, nic: int, queue: int, up: bool = True) -> dict:
        return {"tx_bytes": tx, "rx_bytes": 0, "queue_bytes": [0, 0, 0, queue, 0, 0, 0, 0], "queue_hwm": [0] * 8,
                "paused_s": [0.0] * 8, "pfc_tx": 0, "pfc_rx": 0, "ecn_marked": 3, "drops": {"buffer_full": 2},
                "trimmed": [0] * 8, "up": up, "host_nic": {"tx_bytes": nic}}

    def stats(t: float, sent: int, queue: int, up: bool = True) -> dict:
        # 10 us of fabric time apart: gpu0 -> p0l0 and p0l0 -> gpu1 carry `sent` bytes each.
        return {"dilation": 1.0, "workers": [{"fabric_now_s": t, "fidelity": {"p99_s": 0.0}}],
                "switches": {"p0l0": {"ports": {"p0l0-eth0": port(0, sent, 0, up), "p0l0-eth1": port(sent, 0, queue)}}}}

    return topo, [stats(0.0, 0, 0), stats(10e-6, 62_500, 4096), stats(20e-6, 93_750, 0, up=False)]


def client(token: str = "t0k") -> tuple[TestClient, list[dict]]:
    topo, series = fabric()
    it = iter(series)
    last: list[dict] = []

    def stats() -> dict:
        last[:] = [next(it, last[0] if last else series[-1])]
        return last[0]

    return TestClient(make_app(topo, stats, token, clock="fabric", period_s=0.0)), series


def test_without_the_token_every_route_refuses():
    c, _ = client()
    for path in ("/", "/topology.json", "/metrics", "/?token=wrong"):
        assert c.get(path).status_code == 403, path
    with pytest.raises(WebSocketDisconnect) as no, c.websocket_connect("/ws"):
        pass
    assert no.value.code == 1008
    assert c.get("/view.js").status_code == 200  # the page's code holds no data


def test_snapshots_carry_fabric_time_utilisation_queues_and_failures():
    c, _ = client()
    assert "emu: the fabric, live" in c.get("/?token=t0k").text
    topo = c.get("/topology.json", headers={"Authorization": "Bearer t0k"}).json()
    assert len(topo["links"]) == 2 and {n["name"] for n in topo["nodes"]} == {"gpu0", "gpu1", "p0l0"}
    with c.websocket_connect("/ws?token=t0k") as ws:
        first, second, third = ws.receive_json(), ws.receive_json(), ws.receive_json()
    assert first["fabric_s"] == 0.0 and first["links"][0]["ab"] is None  # no rate from one sample
    assert second["fabric_s"] == pytest.approx(10e-6)
    # 62 500 B in 10 us on 100G: half the line rate, each way counted where the engine sees it
    assert second["links"][0]["ab"] == pytest.approx(0.5) and second["links"][1]["ab"] == pytest.approx(0.5)
    assert second["ports"]["p0l0:p0l0-eth1"]["queue_bytes"][3] == 4096
    assert third["links"][0]["up"] is False and third["links"][1]["up"] is True
    assert "fabric clock: exact" in third["fidelity"]


def test_the_page_gets_four_snapshots_a_second():
    """README: the live view updates four times a second (PERIOD_S): the websocket's snapshots arrive a
    quarter of a second apart, by the median gap of five (a slow moment shifts one gap, not the median)."""
    import statistics
    import time

    from emu.web.app import PERIOD_S

    topo, series = fabric()
    c = TestClient(make_app(topo, lambda: series[-1], "t0k", clock="fabric"))
    with c.websocket_connect("/ws?token=t0k") as ws:
        ws.receive_json()
        times = []
        for _ in range(5):
            ws.receive_json()
            times.append(time.monotonic())
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert PERIOD_S == 0.25 and 0.2 < statistics.median(gaps) < 0.4, gaps


def test_a_fabric_that_stops_ends_the_snapshots_with_its_reason():
    topo, series = fabric()
    calls = iter([series[0]])

    def stats() -> dict:
        s = next(calls, None)
        if s is None:
            raise ConnectionRefusedError("engine worker 0 is gone")
        return s

    c = TestClient(make_app(topo, stats, "t0k", clock="fabric", period_s=0.0))
    with c.websocket_connect("/ws?token=t0k") as ws:
        assert ws.receive_json()["fabric_s"] == 0.0
        assert ws.receive_json() == {"ended": "ConnectionRefusedError: engine worker 0 is gone"}
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()


def test_control_fails_and_restores_only_when_allowed_and_says_why_it_refuses():
    topo, series = fabric()
    done: list[tuple[str, dict]] = []

    def control(verb: str, target: dict) -> None:
        if target.get("plane", 0) > 0:
            raise ValueError(f"no plane {target['plane']}")  # what FabricNet.fail says
        done.append((verb, target))

    c = TestClient(make_app(topo, lambda: series[0], "t0k", control=control))
    assert c.post("/control", json={"verb": "fail", "plane": 0}).status_code == 403  # no token
    r = c.post("/control?token=t0k", json={"verb": "fail", "plane": 0})
    assert r.status_code == 200 and done == [("fail", {"plane": 0})]
    c.post("/control?token=t0k", json={"verb": "restore", "link": ["gpu0", "p0l0"]})
    assert done[-1] == ("restore", {"link": ("gpu0", "p0l0")})
    for bad, why in (({"verb": "fail", "plane": 3}, "no plane 3"), ({"verb": "drop", "plane": 0}, "give verb"),
                     ({"verb": "fail", "plane": 0, "switch": "p0l0"}, "exactly one"),
                     ({"verb": "fail", "link": ["gpu0"]}, "two node names"), ({"verb": "fail", "plane": "0"}, "number")):
        r = c.post("/control?token=t0k", json=bad)
        assert r.status_code == 400 and why in r.json()["error"], (bad, r.text)
    assert c.post("/control?token=t0k", content=b"{not json").status_code == 400
    assert len(done) == 2
    assert c.get("/topology.json?token=t0k").json()["control"] is True
    ro = TestClient(make_app(topo, lambda: series[0], "t0k"))  # read-only: the default
    r = ro.post("/control?token=t0k", json={"verb": "fail", "plane": 0})
    assert r.status_code == 403 and "--web-control" in r.json()["error"]
    assert ro.get("/topology.json?token=t0k").json()["control"] is False


def test_metrics_are_prometheus_text_labelled_by_plane_switch_port_and_priority():
    c, _ = client()
    text = c.get("/metrics?token=t0k").text
    assert 'emu_port_tx_bytes_total{plane="0",port="p0l0-eth1",switch="p0l0"} 0.0' in text
    assert 'emu_port_drops_total{plane="0",port="p0l0-eth0",reason="buffer_full",switch="p0l0"} 2.0' in text
    assert 'emu_port_queue_bytes{plane="0",port="p0l0-eth1",priority="3",switch="p0l0"}' in text
    assert "emu_fabric_seconds " in text


def test_a_recorded_topology_reads_back_the_same_and_an_engine_spec_draws_too():
    """What FabricNet records for `emu web` (to_json) reads back equal (from_json), cable delays included;
    an engine run without Mininet (a bench's pair) is drawn from its spec: a switch, a host per port."""
    from emu.dataplane.spec import EngineSpec, PortSpec, SwitchSpec
    from emu.web.scene import topology_of_spec

    topo, _ = fabric()
    topo.links[1] = Link(1, topo.links[1].a, topo.links[1].b, 100e9, 100e-6)  # 20 km
    again = Topology.from_json(topo.to_json())
    assert again == topo and again.links[1].delay_s == 100e-6
    ports = tuple(PortSpec(i, f"s0-eth{i}", f"02:00:00:00:00:0{i}", 100e9, 1e-6, "host") for i in range(2))
    drawn = topology_of_spec(EngineSpec((SwitchSpec("s0", ports),), dilation=1000.0))
    assert [(lk.a.port, lk.b.node, lk.delay_s) for lk in drawn.links] == [("s0-eth0", "h:s0-eth0", 1e-6),
                                                                          ("s0-eth1", "h:s0-eth1", 1e-6)]


def test_layout_puts_hosts_below_and_planes_side_by_side():
    kinds = {"gpu0": "host", "p0l0": "switch", "p0s0": "switch", "p1l0": "switch", "p1s0": "switch"}
    groups = {"gpu0": -1, "p0l0": 0, "p0s0": 0, "p1l0": 1, "p1s0": 1}
    nodes = {n.name: n for n in layout(sorted(kinds), kinds, groups,
                                       [("gpu0", "p0l0"), ("gpu0", "p1l0"), ("p0l0", "p0s0"), ("p1l0", "p1s0")])}
    assert nodes["gpu0"].y > nodes["p0l0"].y > nodes["p0s0"].y  # hosts, leaves, spines, upward
    assert (nodes["p0l0"].layer, nodes["p0s0"].layer) == (1, 2)
    assert nodes["p0l0"].x < 0.5 < nodes["p1l0"].x  # plane 0 left, plane 1 right


def _get(url: str, **params: str) -> tuple[int, str]:
    import urllib.error
    import urllib.parse
    import urllib.request

    try:
        with urllib.request.urlopen(url + ("?" + urllib.parse.urlencode(params) if params else ""), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


@pytest.mark.root
@pytest.mark.mininet
def test_a_running_fabric_serves_its_view_on_loopback_only_and_stops_with_it(no_leftovers):
    import json
    import urllib.error

    from emu import FabricNet, FPFTopo

    with FabricNet(FPFTopo(gpus=4, planes=2, leaves=1), clock="fabric") as net:
        view = net.web()
        base = f"http://127.0.0.1:{view.port}"
        assert view.host == "127.0.0.1" and view.url.startswith(f"{base}/?token=")
        assert _get(f"{base}/metrics")[0] == 403
        net.roce.write("gpu0", "gpu1", nbytes=1 << 20)
        status, text = _get(f"{base}/metrics", token=view.token)
        sent = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("emu_port_tx_bytes_total{") and 'switch="p1l0"' in line]
        assert status == 200 and len(sent) >= 4 and sum(sent) > 1 << 19  # plane 1's leaf carried about half
        topo = json.loads(_get(f"{base}/topology.json", token=view.token)[1])
        assert len(topo["links"]) == 8  # 4 GPUs x 2 planes
        with pytest.raises(ValueError, match="cannot listen"):
            net.web(port=view.port)  # the port is taken: one clear error
    with pytest.raises(urllib.error.URLError):
        _get(f"{base}/metrics")


@pytest.mark.root
@pytest.mark.mininet
def test_emu_up_serves_the_view_it_prints_and_a_bad_address_is_one_clear_error(no_leftovers):
    import json
    import subprocess

    from tests.helpers import EMU

    out = subprocess.run([*EMU, "up", "fpf", "--gpus", "2", "--planes", "1", "--clock", "fabric", "--test", "pingall",
                          "--web", "0", "--json"], capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["passed"], out.stderr[-1500:]
    assert result["web"].startswith("http://127.0.0.1:") and "?token=" in result["web"]
    bad = subprocess.run([*EMU, "up", "fpf", "--gpus", "2", "--planes", "1", "--test", "pingall", "--web", "host:http"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "--web: give [ADDR:]PORT" in bad.stderr and "Traceback" not in bad.stderr
    alone = subprocess.run([*EMU, "up", "fpf", "--gpus", "2", "--test", "pingall", "--web-control"],
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode == 1 and "--web-control goes with --web" in alone.stderr


def test_a_recording_replays_on_the_live_page_with_the_same_panels_and_a_slider(tmp_path):
    """Three snapshots recorded (emu.web.app.Recorder: the first from its thread, one taken, the last at
    stop) and replayed by `emu view` on the live view's own page: the panels hold exactly the recorded
    figures (p0l0 -> gpu1 at half and a quarter of its 100G, 50 and 25 Gb/s on plane 0; the 4 KB queue
    of the second), the failed link greyed at the end and not before, and the slider steps back."""
    import json
    import subprocess
    import time

    from emu.web.app import Recorder
    from emu.web.devtools import Browser
    from tests.helpers import EMU

    topo, series = fabric()
    hot = series[1]["switches"]["p0l0"]["ports"]["p0l0-eth1"]  # the second snapshot: 7 marks, 2 trims, a job
    hot["ecn_marked"], hot["trimmed"] = 10, [0, 0, 0, 2, 0, 0, 0, 0]
    series[1]["workers"][0]["jobs"] = [{"job": 1, "what": "allreduce of 4096 B (size 1 of 1)", "fabric_s": 5e-6}]
    it = iter(series)
    rec = Recorder(topo, lambda: next(it), clock="fabric", period_s=3600)
    deadline = time.monotonic() + 10
    while not rec.taken and time.monotonic() < deadline:
        time.sleep(0.01)
    rec.take()
    path = tmp_path / "live.json"
    path.write_text(json.dumps(rec.stop()))
    assert [s["fabric_s"] for s in json.loads(path.read_text())["recording"]["snapshots"]] == [0.0, 10e-6, 20e-6]
    proc = subprocess.Popen([*EMU, "view", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
        with Browser(url, width=1280, height=720) as page:
            page.wait_for("document.body.dataset.ready === '1'", 30)
            assert page.js("window.series.t.length") == 3
            assert page.js("window.series.planes['0']") == pytest.approx([0, 50, 25])
            assert page.js("window.series.queue") == pytest.approx([0, 4.096, 0])
            assert page.js("[window.series.ecn, window.series.trims]") == [[0, 7, 0], [0, 2, 0]]
            assert page.js("document.querySelectorAll('#panel-planes polyline').length") == 1
            assert page.js("document.querySelectorAll('#panel-marks polyline').length") == 2
            assert page.js("document.getElementById('job').textContent") == "no job running"
            # A click keeps the port's figures on screen (and they follow the slider).
            page.js("document.querySelector('line[data-link=\"1\"]').dispatchEvent(new MouseEvent('click'))")
            assert "p0l0:p0l0-eth1" in page.js("document.getElementById('pinned').textContent")
            assert "snapshot 3 of 3, recorded" in page.js("document.getElementById('clock').textContent")
            down = "[...document.querySelectorAll('line[data-link=\"0\"]')].every(e => e.classList.contains('down'))"
            assert page.js(down) is True
            assert page.js("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
            page.js("const s = document.getElementById('slider'); s.value = 1; s.dispatchEvent(new Event('input'))")
            assert page.js("window.series.t.length") == 2 and page.js(down) is False
            assert "snapshot 2 of 3" in page.js("document.getElementById('clock').textContent")
            assert page.js("document.getElementById('job').textContent") == "allreduce of 4096 B (size 1 of 1), 5.0 us in"
            assert "q3 4096 B" in page.js("document.getElementById('pinned').textContent")  # the queue then
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.root
@pytest.mark.mininet
def test_emu_up_records_the_live_view_for_emu_view_and_a_bad_path_builds_nothing(tmp_path, no_leftovers):
    import json
    import subprocess

    from tests.helpers import EMU

    path = tmp_path / "up.json"
    out = subprocess.run([*EMU, "up", "fpf", "--gpus", "2", "--planes", "2", "--clock", "fabric", "--test", "pingall",
                          "--record", str(path), "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and json.loads(out.stdout)["recording"] == str(path), out.stderr[-1500:]
    rec = json.loads(path.read_text())["recording"]
    assert rec["clock"] == "fabric" and len(rec["topology"]["links"]) == 12 and rec["snapshots"]  # 4 host, 8 switch
    assert all(len(s["links"]) == 12 for s in rec["snapshots"])
    bad = subprocess.run([*EMU, "up", "fpf", "--gpus", "2", "--test", "pingall", "--record", "/nonexistent/x.json"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "record: cannot write" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.root
@pytest.mark.mininet
def test_emu_web_attaches_to_a_fabric_another_process_runs_and_ends_with_it(no_leftovers):
    import json
    import subprocess

    from websockets.sync.client import connect

    from emu import FabricNet, FPFTopo
    from tests.helpers import EMU

    nothing = subprocess.run([*EMU, "web"], capture_output=True, text=True, timeout=60)
    assert nothing.returncode == 1 and "no running fabric to view" in nothing.stderr, nothing.stderr
    with FabricNet(FPFTopo(gpus=4, planes=2, leaves=1), clock="fabric") as net:
        proc = subprocess.Popen([*EMU, "web"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
            base, _, token = url.partition("/?token=")
            assert base.startswith("http://127.0.0.1:") and token, url
            assert _get(f"{base}/topology.json")[0] == 403
            topo = json.loads(_get(f"{base}/topology.json", token=token)[1])
            assert len(topo["links"]) == 8 and topo["planes"] == {"p0l0": 0, "p1l0": 1} and topo["clock"] == "fabric"
            net.roce.write("gpu0", "gpu1", nbytes=1 << 20)
            text = _get(f"{base}/metrics", token=token)[1]
            sent = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith('emu_port_tx_bytes_total{plane="1"')]
            assert sum(sent) > 1 << 19  # what this process's write sent, seen from the other one
            with connect(base.replace("http", "ws") + f"/ws?token={token}") as ws:
                snap = json.loads(ws.recv(timeout=30))
            assert snap["fabric_s"] > 0 and len(snap["links"]) == 8 and "fabric clock" in snap["fidelity"]
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
    _, said = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "the fabric stopped" in said, said


@pytest.mark.root
@pytest.mark.mininet
def test_an_open_page_in_chromium_draws_every_link_an_incast_queue_and_a_failed_plane_greyed(no_leftovers):
    """FPF 4 x 2 in a real browser, one page kept open (DevTools protocol): one drawn link per link, each
    snapshot stamped in fabric time; while a 3-to-1 incast runs (0.25 fabric ms, paced to take at least
    2 wall seconds: eight snapshots), the hot port's queue is drawn growing, and drawn empty after it; plane 1
    failed, its four links are greyed within two seconds, the others not; restored from the page's own
    buttons (--web-control), none is; screenshots to results/."""
    import os
    import time

    from emu import FabricNet, FPFTopo
    from emu.net.flows import EngineFlows, Flow
    from emu.scenarios.common import DSCP_LOSSLESS, ECT0
    from emu.web.devtools import Browser

    os.makedirs(RESULTS, exist_ok=True)
    for shot in (f"{RESULTS}/web-fpf-4x2-incast.png", f"{RESULTS}/web-fpf-4x2-plane1-down.png"):
        if os.path.exists(shot):  # an earlier run's: the sizes checked below must be this run's
            os.remove(shot)
    with FabricNet(FPFTopo(gpus=4, planes=2, leaves=1), clock="fabric") as net, \
            Browser(net.web(control=True).url, width=1280, height=720) as page:
        page.wait_for("Number(document.body.dataset.snapshots || 0) >= 2", 30)
        assert page.js("new Set([...document.querySelectorAll('line[data-link]')].map(e => e.dataset.link)).size") == 8
        assert page.js("document.getElementById('clock').textContent").startswith("fabric time ")
        dst = net.get("gpu0").IP()
        hot = "{}:{}".format(*net.host_port("gpu0", dst)[:2])
        queue = f"document.querySelector('rect.queue[data-port=\"{hot}\"]')"
        drawn = f"[Number({queue}.dataset.bytes || 0), Number({queue}.getAttribute('height'))]"
        assert page.js(drawn) == [0, 0]
        net.pace(8000.0)
        traffic = EngineFlows(net, [Flow(f"gpu{i}", "gpu0", dst, 9000, 1 << 20, 100e9, tos=DSCP_LOSSLESS << 2 | ECT0)
                                      for i in (1, 2, 3)])
        seen, arrows, jobs = [], [], []
        held = "[...document.querySelectorAll('line.pauses-a, line.pauses-b')].map(e => e.dataset.link)"
        while not net.engine.job_state(traffic.job)["done"]:
            seen.append(page.js(drawn))
            arrows.append(page.js(held))
            jobs.append(page.js("document.getElementById('job').textContent"))
            if sum(b > 0 for b, _ in seen) == 8:  # mid-incast: the links' colours have had two snapshots
                page.screenshot(f"{RESULTS}/web-fpf-4x2-incast.png")
            time.sleep(0.05)
        traffic.wait()
        net.pace(0.0)
        assert max(b for b, _ in seen) > 100_000 and max(h for _, h in seen) > 0, seen  # PFC holds it near its threshold
        assert any(j.startswith("3 UDP flow(s), ") for j in jobs), jobs  # the header's job line, while it ran
        # The panels (issue 40, item 2), a point a snapshot over fabric time: plane 0 delivered the incast to
        # gpu0 at up to its 100G line rate and plane 1 nothing; the deepest queue drawn is the hot port's,
        # never above the high-water mark the engine counted; ports sent PFC pauses meanwhile.
        series = page.js("window.series")
        hwm_kb = max(net.stats().port(*hot.split(":")).queue_hwm) / 1e3
        assert len(series["t"]) >= 4 and series["t"] == sorted(series["t"]), series["t"]
        assert series["t"][-1] - series["t"][0] < 1.0, series["t"]  # this job's, not the second before it
        assert 50 < max(series["planes"]["0"]) <= 105 and max(series["planes"]["1"]) == 0, series["planes"]
        assert 100 < max(series["queue"]) <= hwm_kb and max(series["pfc"]) >= 1, (series["queue"], hwm_kb)
        assert page.js("document.querySelectorAll('#panels polyline').length") >= 4  # 2 planes, queue, pauses
        assert "line rate" in page.js("document.getElementById('legend').textContent")
        # It fits 1280 x 720: nothing to scroll sideways.
        assert page.js("document.documentElement.scrollWidth <= window.innerWidth"), \
            page.js("[document.documentElement.scrollWidth, window.innerWidth]")
        page.wait_for(f"Number({queue}.dataset.bytes) === 0", 10)  # drained once the incast ended
        # The pause tree as it formed: the leaf held the three senders' NICs (arrows on their host links,
        # none on gpu0's), and once drained no arrow is left.
        senders = {str(i) for i, lk in enumerate(net.links)
                   if {lk.intf1.node.name, lk.intf2.node.name} & {"gpu1", "gpu2", "gpu3"}}
        drawn_held = {x for a in arrows for x in a}
        assert drawn_held and drawn_held <= senders, (drawn_held, senders)
        page.wait_for(f"{held}.length === 0", 10)
        t0 = time.monotonic()
        net.fail(plane=1)
        page.wait_for("new Set([...document.querySelectorAll('line.link.down')].map(e => e.dataset.link)).size === 4", 10)
        greyed_s = time.monotonic() - t0
        assert greyed_s < 2.0, f"plane 1 greyed after {greyed_s:.2f} s"
        print(f"incast: hot queue drawn {seen}; plane 1 greyed after {greyed_s:.3f} s")
        time.sleep(0.5)  # a later snapshot greys no other link
        # Which four: plane 1's links (each touches a switch of shard 1), none of plane 0's.
        plane1 = sorted(str(i) for i, lk in enumerate(net.links)
                        if any(getattr(x.node, "shard", None) == 1 for x in (lk.intf1, lk.intf2)))
        greyed = page.js("[...new Set([...document.querySelectorAll('line.link.down')].map(e => e.dataset.link))]")
        assert len(plane1) == 4 and sorted(greyed) == plane1, (greyed, plane1)
        # README: "failed links dashed grey", as the page draws them, not only as classed.
        style = page.js("(() => { const s = getComputedStyle(document.querySelector('line.link.down'));"
                        " return [s.stroke, s.strokeDasharray]; })()")
        assert style[0] == "rgb(187, 187, 187)" and style[1] not in ("", "none"), style
        page.screenshot(f"{RESULTS}/web-fpf-4x2-plane1-down.png")
        page.js("document.querySelector('button[data-plane=\"1\"]').click()")
        page.wait_for("document.querySelector('button[data-verb=\"restore\"]') !== null", 5)
        page.js("document.querySelector('button[data-verb=\"restore\"]').click()")
        page.wait_for("document.querySelectorAll('line.link.down').length === 0", 10)
        assert "done" in page.js("document.getElementById('said').textContent")
        assert all(net.stats().port(sw, port).up for sw, port in net.plane_ports(1))
    assert os.path.getsize(f"{RESULTS}/web-fpf-4x2-plane1-down.png") > 10_000
    assert os.path.getsize(f"{RESULTS}/web-fpf-4x2-incast.png") > 10_000


@pytest.mark.root
@pytest.mark.mininet
def test_a_large_fabric_is_drawn_a_node_per_plane_and_a_click_opens_one(no_leftovers):
    """Issue 40, item 2: FPF 64 x 8 (over sixty nodes) at 1280 x 720 is drawn as one node per plane and one
    for the hosts, each plane's host links summed into one; nothing to scroll sideways; a click on plane 3
    opens it (its switches across the width, the 64 hosts, its links, each a link of the fabric) and the
    header's button closes it again."""
    from emu import FabricNet, FPFTopo
    from emu.web.devtools import Browser

    with FabricNet(FPFTopo(gpus=64, planes=8), clock="fabric", kernel=False) as net, \
            Browser(net.web().url, width=1280, height=720) as page:
        page.wait_for("Number(document.body.dataset.snapshots || 0) >= 1", 30)
        groups = page.js("[...document.querySelectorAll('[data-group]')].map(e => e.dataset.group)")
        assert sorted(groups) == sorted([*map(str, range(8)), "hosts"]), groups
        summed = page.js("[...new Set([...document.querySelectorAll('line[data-group-link]')]"
                         ".map(e => e.dataset.groupLink + '=' + e.dataset.members))]")
        plane3 = [lk for lk in net.links if any(getattr(x.node, "shard", None) == 3 for x in (lk.intf1, lk.intf2))]
        hosts3 = [lk for lk in plane3 if any(x.node.name.startswith("gpu") for x in (lk.intf1, lk.intf2))]
        assert len(summed) == 8 and f"group 3|hosts={len(hosts3)}" in summed, summed  # FPF's planes never meet
        assert page.js("document.documentElement.scrollWidth <= window.innerWidth")
        page.js("document.querySelector('[data-group=\"3\"]').dispatchEvent(new MouseEvent('click'))")
        page.wait_for("document.querySelectorAll('line[data-link]').length > 0", 5)
        drawn = page.js("[...new Set([...document.querySelectorAll('line[data-link]')].map(e => e.dataset.link))]")
        assert sorted(drawn, key=int) == sorted((str(net.links.index(lk)) for lk in plane3), key=int)
        switches = {n.name for lk in plane3 for n in (lk.intf1.node, lk.intf2.node) if not n.name.startswith("gpu")}
        assert page.js("document.querySelectorAll('rect.node.switch[data-node]').length") == len(switches)
        assert page.js("document.querySelectorAll('circle.node.host').length") == 64
        assert page.js("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(f"{RESULTS}/web-fpf-64x8-plane3.png")
        page.js("document.getElementById('back').click()")
        page.wait_for("document.querySelectorAll('[data-group]').length === 9", 5)


RESULT = {"scenario": "incast", "passed": True, "pfc_frames": 995, "fidelity": {"ok": True, "clock": "fabric"},
          "queue_series": [[1.0, 0], [1.5, 4096], [2.0, 8192], [3.0, 0]],  # pairs
          "received_series": {"10.0.0.3": [[10.0, 11.0, 12.0], [5.0, 6.0, 7.0]]},  # times, then values
          "traces": [[[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]], [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]],
          "flow_bw": [[1.0, 2.0], [3.0, 4.0]]}  # two pairs: a table, not a series


def test_the_token_is_random_unless_emu_web_token_gives_one(monkeypatch):
    from starlette.applications import Starlette

    from emu.web.app import WebView

    views = [WebView(lambda token: Starlette()), WebView(lambda token: Starlette())]
    monkeypatch.setenv("EMU_WEB_TOKEN", "scrape-me-0123456789")
    views.append(WebView(lambda token: Starlette()))
    try:
        assert views[0].token != views[1].token and len(views[0].token) >= 16
        assert views[2].token == "scrape-me-0123456789" and views[2].url.endswith("?token=scrape-me-0123456789")
        monkeypatch.setenv("EMU_WEB_TOKEN", "short")
        with pytest.raises(ValueError, match="at least 16"):
            WebView(lambda token: Starlette())
    finally:
        for v in views:
            v.close()


def test_replay_finds_every_series_shape_and_keeps_the_rest_as_counters():
    from emu.web.replay import MAX_POINTS, counters_of, series_of

    series = {s.name: s for s in series_of(RESULT)}
    assert list(series) == ["queue_series", "received_series.10.0.0.3", "traces.0", "traces.1"]
    assert series["queue_series"].t == [1.0, 1.5, 2.0, 3.0] and series["queue_series"].v == [0, 4096, 8192, 0]
    assert series["received_series.10.0.0.3"].v == [5.0, 6.0, 7.0] and series["traces.1"].v == [1.0, 2.0, 3.0]
    counters = dict(counters_of(RESULT))
    assert counters["pfc_frames"] == 995 and counters["fidelity.clock"] == "fabric" and counters["flow_bw.1.0"] == 3.0
    assert not any(k.startswith(("queue_series", "traces", "received_series")) for k in counters)
    long = series_of({"q": [[i, i * 2] for i in range(3 * MAX_POINTS)]})[0]
    assert len(long.t) == MAX_POINTS and long.t[0] == 0 and long.t[-1] == 3 * MAX_POINTS - 1


def test_the_replay_app_wants_the_token_and_serves_the_result():
    from emu.web.app import make_replay_app

    c = TestClient(make_replay_app(RESULT, "incast.json", "t0k"))
    assert c.get("/").status_code == 403 and c.get("/result.json?token=bad").status_code == 403
    data = c.get("/result.json?token=t0k").json()
    assert data["name"] == "incast.json" and data["scenario"] == "incast" and len(data["series"]) == 4
    assert ["pfc_frames", 995] in data["counters"]
    assert "replayed" in c.get("/?token=t0k").text and c.get("/replay.js").status_code == 200


def test_emu_view_replays_a_result_in_chromium_with_a_time_slider(tmp_path):
    import json
    import subprocess

    from emu.web.devtools import Browser
    from tests.helpers import EMU

    bad = subprocess.run([*EMU, "view", str(tmp_path / "none.json")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "no such file" in bad.stderr
    (tmp_path / "junk.json").write_text("{not json")
    bad = subprocess.run([*EMU, "view", str(tmp_path / "junk.json")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "not a JSON result" in bad.stderr
    path = tmp_path / "incast.json"
    path.write_text(json.dumps(RESULT))
    proc = subprocess.Popen([*EMU, "view", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:") and "?token=" in url
        with Browser(url) as page:
            page.wait_for("document.body.dataset.ready === '1'", 30)
            assert page.js("document.querySelectorAll('.plot polyline').length") == 4
            assert page.js("document.querySelectorAll('#counters tr').length") == 9  # every scalar, no series
            at = "[...document.querySelectorAll('.plot .at')].map(e => e.textContent)"
            assert page.js(at) == ["t 3: 0", "t 12: 7", "t 3: 30", "t 3: 3"]  # the end of the run
            page.js("const s = document.getElementById('slider'); s.value = 500; s.dispatchEvent(new Event('input'))")
            # half-way: 2 on the time base of queue_series and traces (1 .. 3), 11 on received_series' own
            assert page.js(at) == ["t 2: 8192", "t 11: 6", "t 2: 20", "t 2: 2"]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _scrapes(n: int) -> list[str]:
    """/metrics of the test fabric scraped n times, 10 us of fabric time apart: p0l0-eth1 sends 31 250 B
    each time (25 Gb/s of fabric time) with 4096 B queued; p0l0-eth0 is down at the last."""
    import copy

    topo, series = fabric()
    out = []
    for i in range(n):
        s = copy.deepcopy(series[1])
        s["workers"][0]["fabric_now_s"] = 1.0 + i * 10e-6
        ports = s["switches"]["p0l0"]["ports"]
        ports["p0l0-eth1"]["tx_bytes"] = ports["p0l0-eth0"]["host_nic"]["tx_bytes"] = i * 31_250
        ports["p0l0-eth0"]["up"] = i < n - 1
        out.append(TestClient(make_app(topo, lambda s=s: s, "t0k")).get("/metrics?token=t0k").text)
    return out


def test_the_grafana_dashboard_queries_what_metrics_exports_and_promtool_computes_fabric_rates(tmp_path):
    """docs/grafana/emu-fabric.json: every query names only metrics /metrics exports and parses
    (promtool check rules); scraped every 15 s while a port sends 31 250 B per 10 us of fabric time,
    the transmit panel says 25 Gb/s (per fabric second, not the 16.7 kb/s per wall second Prometheus
    sees), the queue panel the 4096 B queued, the ports-down panel the port down (promtool test rules)."""
    import json
    import re
    import subprocess

    dash = json.loads(open(ROOT / "docs" / "grafana" / "emu-fabric.json").read())
    exprs = {p["title"] + t["refId"]: t["expr"] for p in dash["panels"] for t in p["targets"]}
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"]) >= 8
    scrapes = _scrapes(9)  # two minutes: a full 1 min window for rate() at the end
    names = set(re.findall(r"^(emu_\w+)[{ ]", "\n".join(scrapes), re.M))  # the samples' names
    for title, expr in exprs.items():
        used = set(re.findall(r"\bemu_\w+", expr))
        assert used and used <= names, (title, used - names)

    def concrete(expr: str) -> str:
        return expr.replace("$__rate_interval", "1m").replace("$plane", ".*").replace("$switch", ".*")

    rules = tmp_path / "rules.yml"  # JSON is YAML: promtool reads it
    rules.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": [
        {"record": f"panel:{i}", "expr": concrete(e)} for i, e in enumerate(exprs.values())]}]}))
    out = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    series: dict[str, list[str]] = {}
    for i, text in enumerate(scrapes):
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                series.setdefault(key, ["_"] * len(scrapes))[i] = value
    check = [(f'round({exprs["Port transmit rate (per fabric second)A"]}, 1000)', "2m",  # to the kb/s: float sums
              [('{plane="0", port="p0l0-eth0", switch="p0l0"}', 0), ('{plane="0", port="p0l0-eth1", switch="p0l0"}', 25e9)]),
             (exprs["Queue depthA"], "1m", [('{port="p0l0-eth1", priority="3", switch="p0l0"}', 4096)]),
             (exprs["Ports downA"], "2m", [('{plane="0"}', 1)]), (exprs["Ports downA"], "1m45s", [('{plane="0"}', 0)])]
    test = tmp_path / "dashboard_test.yml"
    test.write_text(json.dumps({"rule_files": [], "evaluation_interval": "15s", "tests": [{
        "interval": "15s", "input_series": [{"series": k, "values": " ".join(v)} for k, v in series.items()],
        "promql_expr_test": [{"expr": concrete(e), "eval_time": at,
                              "exp_samples": [{"labels": lab, "value": v} for lab, v in want]} for e, at, want in check]}]}))
    out = subprocess.run(["promtool", "test", "rules", str(test)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


@pytest.mark.root
def test_a_browser_whose_opener_was_killed_is_removed_by_emu_clean(no_leftovers):
    """A bench or test killed with -9 while its headless page is open: `emu clean` kills the browser
    (known by its profile, a scratch folder named after the dead opener) and removes the profile."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from emu.net.cleanup import clean

    code = ("from emu.web.chromium import HeadlessPage; import sys, time; p = HeadlessPage('about:blank'); "
            "print(p.profile, p.proc.pid, flush=True); time.sleep(600)")
    opener = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        profile, pid = opener.stdout.readline().split()  # type: ignore[union-attr]
        deadline = time.monotonic() + 60  # the browser's own processes start (its zygote, below it)
        while not _descendants(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        started = bool(_descendants(int(pid)))
    except BaseException:  # what was started goes, so that no later test finds it left behind
        opener.kill()
        opener.wait()
        clean()
        raise
    if not started:
        # Seen in two fresh clones' suites on 2026-12-06 (never in a run of test_web alone): the browser's own
        # processes did not come. What is not covered then is emu clean's removal of an orphaned browser.
        opener.kill()
        opener.wait()
        clean()
        pytest.skip("chromium started no process of its own in 60 s: emu clean's removal of a browser whose "
                    "opener was killed is not covered by this run")
    opener.send_signal(signal.SIGKILL)
    opener.wait()
    assert os.path.exists(f"/proc/{pid}") and os.path.isdir(profile)
    report = clean()
    assert int(pid) in report.processes and profile in report.run_dirs
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") and not os.path.exists(profile)


def _descendants(pid: int) -> list[int]:
    """The processes below pid, at any depth (a browser may start its helpers through one of its own)."""
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid."""
    import os

    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    return out


def test_a_recording_holds_every_figure_each_snapshot_had_on_each_plane():
    """A Recorder's snapshots over two planes hold, after the JSON `emu view` reads, the figures of each
    interval and no other: each direction's rate since the snapshot before (not since the first), each
    port's queue on its own plane, PFC frames, marks, trims and drops, a pause shown in the interval it
    happened in only, a failed link down in the last snapshot (the one taken at stop), the job running,
    and each switch's plane in the recorded topology. Values, not shapes: each is a figure a replay
    draws."""
    import json
    import time

    from emu.web.app import Recorder

    kinds = {"gpu0": "host", "gpu1": "host", "p0l0": "switch", "p1l0": "switch"}
    groups = {"gpu0": -1, "gpu1": -1, "p0l0": 0, "p1l0": 1}
    edges = [("gpu0", "p0l0"), ("p0l0", "gpu1"), ("gpu0", "p1l0"), ("p1l0", "gpu1")]
    topo = Topology(layout(sorted(kinds), kinds, groups, edges),
                    [Link(0, End("gpu0", None, None), End("p0l0", "p0l0", "p0l0-eth0"), 100e9),
                     Link(1, End("p0l0", "p0l0", "p0l0-eth1"), End("gpu1", None, None), 100e9),
                     Link(2, End("gpu0", None, None), End("p1l0", "p1l0", "p1l0-eth0"), 100e9),
                     Link(3, End("p1l0", "p1l0", "p1l0-eth1"), End("gpu1", None, None), 100e9)],
                    {"p0l0": 0, "p1l0": 1})

    def port(k: int, tx: list[int], nic: list[int], **kw: list) -> dict:
        q = kw.get("queue", [0, 0, 0])[k]
        return {"tx_bytes": tx[k], "rx_bytes": 0, "queue_bytes": [0, 0, 0, q, 0, 0, 0, 0],
                "queue_hwm": [0, 0, 0, max(kw.get("queue", [0])[:k + 1]), 0, 0, 0, 0],
                "paused_s": [0.0] * 8, "pfc_tx": kw.get("pfc", [0, 0, 0])[k], "pfc_rx": 0,
                "ecn_marked": kw.get("ecn", [0, 0, 0])[k], "drops": {"buffer_full": kw.get("drops", [0, 0, 0])[k]},
                "trimmed": [0, 0, 0, kw.get("trims", [0, 0, 0])[k], 0, 0, 0, 0], "up": kw.get("up", [True] * 3)[k],
                "host_nic": {"tx_bytes": nic[k], "paused_s": [0.0, 0.0, 0.0, kw.get("held", [0.0] * 3)[k], 0, 0, 0, 0]}}

    def stats(k: int) -> dict:
        # 10 us apart. Plane 0: 50 kB an interval each way across (0.4 of 100G), 1 kB back; its link to gpu1
        # fails by the last. Plane 1: 25 kB then 75 kB (0.2, then 0.6), an 8 KiB queue, PFC into gpu0's NIC
        # in the second interval only, marks, trims and drops.
        return {"dilation": 1.0, "workers": [{"fabric_now_s": k * 10e-6, "fidelity": {"p99_s": 0.0},
                                              "jobs": [{"job": 3, "what": "w", "fabric_s": 1e-6}] if k == 1 else []}],
                "switches": {
                    "p0l0": {"ports": {"p0l0-eth0": port(k, [0, 1000, 2000], [0, 50_000, 100_000]),
                                       "p0l0-eth1": port(k, [0, 50_000, 100_000], [0, 0, 0], up=[True, True, False])}},
                    "p1l0": {"ports": {"p1l0-eth0": port(k, [0, 0, 0], [0, 25_000, 100_000], pfc=[0, 4, 4],
                                                         held=[0.0, 3e-6, 3e-6]),
                                       "p1l0-eth1": port(k, [0, 25_000, 100_000], [0, 0, 0], queue=[0, 8192, 0],
                                                         ecn=[0, 5, 9], trims=[0, 2, 2], drops=[0, 0, 1])}}}}

    calls = iter(range(3))
    rec = Recorder(topo, lambda: stats(next(calls)), clock="fabric", period_s=3600)
    deadline = time.monotonic() + 10
    while not rec.taken and time.monotonic() < deadline:
        time.sleep(0.01)
    rec.take()
    out = json.loads(json.dumps(rec.stop()))["recording"]
    snaps = out["snapshots"]
    assert out["topology"]["planes"] == {"p0l0": 0, "p1l0": 1} and out["period_s"] == 3600
    assert [s["fabric_s"] for s in snaps] == [0.0, 10e-6, 20e-6]
    rates = [[(lk["ab"], lk["ba"]) for lk in s["links"]] for s in snaps]
    assert rates[0] == [(None, None)] * 4  # no rate from one sample
    for got, want in zip(rates[1:], [[(0.4, 0.008), (0.4, 0.0), (0.2, 0.0), (0.2, 0.0)],
                                     [(0.4, 0.008), (0.4, 0.0), (0.6, 0.0), (0.6, 0.0)]], strict=True):
        assert [(pytest.approx(a), pytest.approx(b)) for a, b in want] == got, got
    assert [[lk["up"] for lk in s["links"]] for s in snaps] == [[True] * 4, [True] * 4, [True, False, True, True]]
    hot, held = "p1l0:p1l0-eth1", "p1l0:p1l0-eth0"
    assert [s["ports"][hot]["queue_bytes"][3] for s in snaps] == [0, 8192, 0]
    assert [s["ports"]["p0l0:p0l0-eth1"]["queue_bytes"][3] for s in snaps] == [0, 0, 0]  # the other plane's
    assert [s["ports"][hot]["queue_hwm"][3] for s in snaps] == [0, 8192, 8192]
    assert [s["ports"][held]["pfc_tx"] for s in snaps] == [0, 4, 4]
    assert [s["ports"][held]["host_pausing"][3] for s in snaps] == [False, True, False]  # held in its interval
    assert [(s["ports"][hot]["ecn_marked"], s["ports"][hot]["trimmed"], s["ports"][hot]["drops"]) for s in snaps] == [
        (0, 0, {"buffer_full": 0}), (5, 2, {"buffer_full": 0}), (9, 2, {"buffer_full": 1})]
    assert [[j["job"] for j in s["jobs"]] for s in snaps] == [[], [3], []]
