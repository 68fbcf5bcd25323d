"""The live view's server: a Starlette app (the page, the topology, snapshots over a websocket, and
Prometheus's /metrics), and `WebView`, which serves it from a thread beside a running fabric.

Every route wants the token the server was started with (`?token=` or `Authorization: Bearer`):
the page shows a fabric's traffic, and a machine may have other users. It listens on 127.0.0.1
unless told otherwise, and it is read-only unless it is given a `control` (`--web-control`): then
POST /control fails or restores a plane, a link or a switch, through the same FabricNet.fail and
restore (and their checks) as the CLI's commands.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import os
import secrets
import socket
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from emu.clock import ClockKind, check_clock
from emu.web.replay import counters_of, series_of
from emu.web.scene import FabricCollector, Snapshots, Topology

PERIOD_S = 0.25  # wall seconds between snapshots: the page updates four times a second
VERBS = ("fail", "restore")
# control(verb, target): FabricNet.fail or restore with target {"plane": N} | {"link": (a, b)} | {"switch": s};
# raises ValueError (or KeyError, RuntimeError) with the reason for what it refuses.
Control = Callable[[str, dict[str, Any]], None]


def _allowed(conn: HTTPConnection, token: str) -> bool:
    given = conn.query_params.get("token", "")
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        given = given or auth[7:].strip()
    return hmac.compare_digest(given.encode(), token.encode())


def _guarded(handler: Callable[[Request], Response], token: str) -> Callable[[Request], Any]:
    """The route, for a request that carries the token; 403 for any other."""
    async def run(request: Request) -> Response:
        if not _allowed(request, token):
            return PlainTextResponse("a token is needed: use the URL the server printed", status_code=403)
        return handler(request)
    return run


def target_of(body: Any) -> tuple[str, dict[str, Any]]:
    """A control request's verb and target, checked for shape (the fabric checks that they exist)."""
    if not isinstance(body, dict) or body.get("verb") not in VERBS:
        raise ValueError(f"give verb: one of {', '.join(VERBS)}")
    given = [k for k in ("plane", "link", "switch") if k in body]
    if len(given) != 1 or set(body) - {"verb", *given}:
        raise ValueError("give exactly one of plane (a number), link ([a, b]) or switch (a name)")
    value = body[given[0]]
    if given[0] == "plane" and not (isinstance(value, int) and not isinstance(value, bool)):
        raise ValueError(f"plane is a number, got {value!r}")
    if given[0] == "link":
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
            raise ValueError(f"link is two node names, got {value!r}")
        value = tuple(value)
    if given[0] == "switch" and not isinstance(value, str):
        raise ValueError(f"switch is a name, got {value!r}")
    return body["verb"], {given[0]: value}


def make_app(topo: Topology, stats: Callable[[], dict[str, Any]], token: str, *, clock: str | ClockKind = ClockKind.WALL,
             period_s: float = PERIOD_S, control: Control | None = None) -> Starlette:
    """`stats()`: the engine's counters now (engine.stats), called at each snapshot and scrape;
    `control`: how to fail and restore (None: the view is read-only)."""
    page = resources.files("emu.web").joinpath("static/index.html").read_text()
    script = resources.files("emu.web").joinpath("static/view.js").read_text()
    registry = CollectorRegistry()
    registry.register(FabricCollector(topo, stats))  # type: ignore[arg-type]

    async def snapshots(ws: WebSocket) -> None:
        if not _allowed(ws, token):
            await ws.close(code=1008)
            return
        await ws.accept()
        snaps = Snapshots(topo, clock)
        try:
            while True:
                try:
                    now = await asyncio.to_thread(stats)
                except Exception as exc:  # the fabric stopped (or died): the page says so, once
                    await ws.send_json({"ended": f"{type(exc).__name__}: {exc}"})
                    await ws.close(code=1011)
                    return
                await ws.send_json(snaps.take(now))
                app.state.snapshots += 1
                await asyncio.sleep(period_s)
        except (WebSocketDisconnect, RuntimeError):
            return

    async def act(request: Request) -> Response:
        if not _allowed(request, token):
            return PlainTextResponse("a token is needed: use the URL the server printed", status_code=403)
        if control is None:
            return JSONResponse({"error": "this view is read-only: start it with --web-control "
                                          "(net.web(control=True)) to fail and restore from the page"},
                                status_code=403)
        try:
            verb, target = target_of(await request.json())
            await asyncio.to_thread(control, verb, target)
        except (ValueError, KeyError, RuntimeError) as exc:  # JSONDecodeError is a ValueError
            return JSONResponse({"error": str(exc).strip("'\"")}, status_code=400)
        return JSONResponse({"ok": True, "verb": verb, **target})

    app = Starlette(routes=[
        Route("/", _guarded(lambda r: HTMLResponse(page), token)),
        Route("/view.js", lambda r: Response(script, media_type="text/javascript")),  # code, no data: open
        Route("/topology.json", _guarded(lambda r: JSONResponse({**topo.to_json(), "clock": clock,
                                                                 "control": control is not None}), token)),
        Route("/control", act, methods=["POST"]),
        Route("/metrics", _guarded(lambda r: Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST),
                                   token)),
        WebSocketRoute("/ws", snapshots),
    ])
    app.state.snapshots = 0  # snapshots sent to pages: what a benchmark reports
    return app


def make_replay_app(result: dict[str, Any], name: str, token: str) -> Starlette:
    """The replay page of a saved result (`emu view`): its series drawn with a time slider, its counters.
    A recording of the live view (Recorder) is replayed on the live view's own page, drawing and panels,
    with a slider over its snapshots."""
    if "recording" in result:
        return _recording_app(result["recording"], name, token)
    page = resources.files("emu.web").joinpath("static/replay.html").read_text()
    script = resources.files("emu.web").joinpath("static/replay.js").read_text()
    data = {"name": name, "scenario": result.get("scenario", ""), "passed": result.get("passed"),
            "series": [s.to_json() for s in series_of(result)],
            "counters": [[path, value] for path, value in counters_of(result)]}

    return Starlette(routes=[
        Route("/", _guarded(lambda r: HTMLResponse(page), token)),
        Route("/replay.js", lambda r: Response(script, media_type="text/javascript")),  # code, no data: open
        Route("/result.json", _guarded(lambda r: JSONResponse(data), token)),
    ])


def _recording_app(rec: dict[str, Any], name: str, token: str) -> Starlette:
    page = resources.files("emu.web").joinpath("static/index.html").read_text()
    script = resources.files("emu.web").joinpath("static/view.js").read_text()
    topology = {**rec["topology"], "clock": check_clock(rec.get("clock", ClockKind.WALL)), "control": False, "recorded": name}
    return Starlette(routes=[
        Route("/", _guarded(lambda r: HTMLResponse(page), token)),
        Route("/view.js", lambda r: Response(script, media_type="text/javascript")),  # code, no data: open
        Route("/topology.json", _guarded(lambda r: JSONResponse(topology), token)),
        Route("/recording.json", _guarded(lambda r: JSONResponse(rec["snapshots"]), token)),
    ])


def check_recording_path(path: str) -> None:
    """ValueError unless a recording can be written at `path` (checked before a fabric is built)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ValueError(f"record: cannot write {path}: {folder} is not a folder this user can write")


class Recorder:
    """The live view's snapshots, taken from a thread every `period_s` whether or not a page is open, for
    `emu view` to replay with the same drawing and panels (a NetAnim trace, in the live view's own
    terms). At most MAX_SNAPSHOTS are kept (the first ones go: at four a second, 83 minutes)."""

    MAX_SNAPSHOTS = 20_000

    def __init__(self, topo: Topology, stats: Callable[[], dict[str, Any]], *, clock: str | ClockKind = ClockKind.WALL,
                 period_s: float = PERIOD_S) -> None:
        self.topo, self.clock, self.period_s = topo, check_clock(clock), period_s
        self.snaps = Snapshots(topo, clock)
        self.taken: collections.deque[dict[str, Any]] = collections.deque(maxlen=self.MAX_SNAPSHOTS)
        self.stats = stats
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="emu-record", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            self.take()
            self.done.wait(self.period_s)

    def take(self) -> None:
        """One snapshot now (the fabric gone: nothing)."""
        try:
            self.taken.append(self.snaps.take(self.stats()))
        except Exception:  # noqa: BLE001 (a fabric stopping under the recorder ends the recording, not the run)
            self.done.set()

    def stop(self) -> dict[str, Any]:
        """Stop, with a last snapshot (the fabric's state at the end); the recording, as `emu view` reads it."""
        running = not self.done.is_set()
        self.done.set()
        self.thread.join(timeout=5)
        if running:
            self.take()
        return {"recording": {"topology": self.topo.to_json(), "clock": self.clock, "period_s": self.period_s,
                              "snapshots": list(self.taken)}}


class WebView:
    """An app served from a thread of this process, on `host:port` (port 0: any free one): `app(token)`
    makes it (make_app, make_replay_app) with the token every route wants. The URL it gives carries
    the token: a random one, or EMU_WEB_TOKEN's (for a Prometheus that scrapes every run with the same
    credentials). `close()` stops it (FabricNet.stop does)."""

    def __init__(self, app: Callable[[str], Starlette], *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.token = os.environ.get("EMU_WEB_TOKEN") or secrets.token_urlsafe(16)
        if len(self.token) < 16 or not self.token.isascii() or not self.token.isprintable() or " " in self.token:
            raise ValueError("EMU_WEB_TOKEN: give at least 16 printable characters, no spaces")
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
            self.sock.listen(128)  # connections queue from now on, before the server's thread accepts
        except OSError as exc:
            self.sock.close()
            raise ValueError(f"web view: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.host, self.port = host, self.sock.getsockname()[1]
        self.app = app(self.token)
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self._serve, name="emu-web", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self.token}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()
