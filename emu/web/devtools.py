"""Headless Chromium driven over the DevTools protocol: one page, kept open, read with JavaScript.

What `--dump-dom` cannot do: watch an open page change (a queue growing, a link greying) without
loading it again, and take screenshots of it (the tests, and tools/screenshots.py for the docs). The
browser is emu.web.chromium's HeadlessPage: its own session, a scratch profile; `close()` kills the
group, so no renderer outlives its user.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import time
import urllib.request
from typing import Any

from websockets.sync.client import connect

from emu.web.chromium import HeadlessPage


class Browser:
    """One page at `url`, `width` x `height` pixels; `js`, `wait_for`, `screenshot`; a context manager."""

    def __init__(self, url: str, *, width: int = 1200, height: int = 800, timeout_s: float = 30.0) -> None:
        self.page = HeadlessPage(url, width=width, height=height, devtools=True)
        self.ids = itertools.count(1)
        self.stack = contextlib.ExitStack()
        try:
            port = self.page.devtools_port(timeout_s)
            deadline = time.monotonic() + timeout_s
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if not pages:
                raise RuntimeError("chromium opened no page")
            self.ws = self.stack.enter_context(connect(pages[0]["webSocketDebuggerUrl"], max_size=None,
                                                       open_timeout=timeout_s))
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            detail = r["exceptionDetails"]
            raise RuntimeError(f"{expression}: {detail.get('exception', {}).get('description') or detail.get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float, every_s: float = 0.05) -> float:
        """Wall seconds until `expression` is true in the page (one that throws, e.g. before the page
        has loaded, is not true yet); TimeoutError after `timeout_s`."""
        t0 = time.monotonic()
        while True:
            try:
                if self.js(expression):
                    return time.monotonic() - t0
                why = "false"
            except RuntimeError as exc:
                why = str(exc)
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"not true within {timeout_s:g} s ({why}): {expression}")
            time.sleep(every_s)

    def screenshot(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        self.stack.close()
        self.page.close()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
