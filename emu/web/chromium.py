"""Headless Chromium kept open on a page of ours: the live view's benchmark holds the page open while
it measures the engine, and the view's tests drive it (with `devtools=True`, over the DevTools protocol).

Its profile is a scratch folder (emu.launch.scratch_dir) named after this process, and Chromium runs in
a session of its own: `close()` kills the whole group, and if this process dies first (kill -9),
`emu clean` knows the browser by its profile's owner and kills it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from emu.launch import scratch_dir

CHROMIUM = "chromium"


class HeadlessPage:
    def __init__(self, url: str, *, width: int = 1200, height: int = 800, devtools: bool = False) -> None:
        if shutil.which(CHROMIUM) is None:
            raise RuntimeError("chromium not found: install Debian's chromium package (make setup does)")
        self.profile = scratch_dir("chromium")
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                f"--user-data-dir={self.profile}", f"--window-size={width},{height}"]
        if devtools:
            args.append("--remote-debugging-port=0")  # Chromium picks a free port and writes it down
        self.proc = subprocess.Popen([*args, url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def devtools_port(self, timeout_s: float = 30.0) -> int:
        """The DevTools port Chromium chose (it writes it into its profile)."""
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            try:
                with open(path) as f:
                    first = f.readline().strip()
                if first.isdigit():
                    return int(first)
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"chromium gave no DevTools port in {timeout_s:g} s")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> HeadlessPage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
