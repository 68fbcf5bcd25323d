"""How the emulator starts its own processes (engine workers, endpoints, traffic, ranks), and where
they write.

They often run as root, so they never import from the current directory: the
module runs with `-P` (no script or working directory first on sys.path), and
the path they get is the parent's absolute one less the working directory (a
`json.py` beside the user would otherwise be run as root by every worker).
The parent's path is kept because `mn --custom` runs outside the venv.
What they write (run records, sockets, logs) goes in directories only root
can enter, made so whatever the umask, and never through a planted symlink.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

RUN_ROOT = "/run/emu"
SCRATCH = os.path.join(RUN_ROOT, "scratch")  # endpoints' and ranks' rendezvous folders


def python_module(module: str, *args: str) -> list[str]:
    """The command line that runs `python -m module args` safely, with this interpreter."""
    return [sys.executable, "-P", "-m", module, *args]


def proc_stat(pid: int, field: int) -> int:
    """Numeric field `field` of /proc/PID/stat, counted from the state (1: ppid, 19: start time),
    or -1 if the process is gone; the command name before it may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[field])
    except (OSError, ValueError, IndexError):
        return -1


def peak_rss(pid: int) -> int:
    """The most memory process `pid` has held at once (VmHWM), in bytes; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
    except (OSError, ValueError):
        return 0


def process_start(pid: int) -> int:
    """When process `pid` started (clock ticks since boot): with the pid, which process it is; -1 if it is
    gone, or dead and not yet reaped (a zombie: a worker killed on another machine stays one until its
    ssh session's sshd reaps it, and its run is over all the same)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    if not fields or fields[0] in ("Z", "X"):
        return -1
    try:
        return int(fields[19])
    except (ValueError, IndexError):
        return -1


def owner() -> dict[str, int]:
    """This process as the owner of a run: `emu clean` leaves a run alone while its owner lives."""
    return {"pid": os.getpid(), "start": process_start(os.getpid())}


def private_dir(path: str) -> str:
    """`path` as a directory only this user can enter (0700 whatever the umask); refused if it is a
    symlink or someone else's, so nothing of ours is written where another user chose."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{path} is not a directory of ours (a symlink, or owned by uid {st.st_uid}): remove it")
    os.chmod(path, 0o700)
    return path


# The directory this package is imported from: a checkout run in place (mn --custom from it) needs it.
_OWN_ROOT = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(**extra: str) -> dict[str, str]:
    """This environment with PYTHONPATH set to this process's absolute sys.path, less the working directory
    (unless it is where this package itself comes from)."""
    cwd = os.path.realpath(os.getcwd())
    paths = [p for p in sys.path
             if p and os.path.isabs(p) and (os.path.realpath(p) != cwd or os.path.realpath(p) == _OWN_ROOT)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **extra)


def scratch_dir(prefix: str) -> str:
    """A fresh private folder for one run of endpoints or ranks, under SCRATCH (root only, never a
    fixed name in /tmp). Its name carries this process's pid and start time, so `emu clean` removes
    it once this process is gone, a kill -9 included."""
    me = owner()
    return tempfile.mkdtemp(prefix=f"{prefix}-{me['pid']}.{me['start']}-", dir=private_dir(SCRATCH))


def scratch_owner_alive(name: str) -> bool:
    """Whether the process that made scratch folder `name` (by scratch_dir) still runs."""
    try:
        pid, start = name.rsplit("-", 2)[1].split(".")
        return process_start(int(pid)) == int(start)
    except ValueError:
        return False


class Stopped(BaseException):
    """The process was asked to stop (SIGTERM, SIGHUP): raised where it runs, so every `with
    FabricNet(...)` and `finally` on the way out tears down as a normal exit does. Not a
    KeyboardInterrupt, which Mininet's CLI takes as "clear the line" and carries on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# SIGINT stays Python's KeyboardInterrupt: it unwinds the same way, and the interactive CLI keeps it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_held = 0  # depth of held_signals() in the main thread
_pending: int | None = None  # a stop signal that arrived while held


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """A stop signal arriving inside is raised when the block ends, not in the middle of it: for
    calls that must not be cut half-way (a netlink request inside pyroute2's asyncio machinery, which
    an exception raised there leaves unusable for the tear-down that follows)."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if _held == 0 and _pending is not None:
            signum, _pending = _pending, None
            raise Stopped(signum)


def _again(kind: type[BaseException], signum: int) -> None:
    """A lost stop, delivered again to the main thread: as its signal where Python handles that signal; a
    KeyboardInterrupt where SIGINT is ignored (a job a shell started in the background inherits that, and
    the signal would then be dropped) is raised there directly, as Python raises an exception between two
    of its instructions (PyThreadState_SetAsyncExc)."""
    if callable(signal.getsignal(signum)):
        os.kill(os.getpid(), signum)
    else:
        import ctypes

        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.main_thread().ident), ctypes.py_object(kind))


def stop_on_signals(signals: tuple[int, ...] = STOP_SIGNALS) -> Callable[[], None]:
    """From now on, the first of `signals` raises Stopped in the main thread; any that follows while
    the tear-down runs is noted and dropped, so a second stop (systemd repeats it) cannot cut the
    tear-down short (kill -9 still can: workers then die with their owner, and the next run or `emu
    clean` removes the rest). Returns a function that puts the old handlers back. Main thread only
    (Python's rule); elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {s: signal.getsignal(s) for s in signals}
    stopping = False

    def handler(signum: int, _frame: object) -> None:
        nonlocal stopping
        global _pending
        if _held and not stopping:
            _pending = signum
            stopping = True
            return
        if stopping:
            print(f"emu: {signal.Signals(signum).name} while stopping: finishing the tear-down first",
                  file=sys.stderr, flush=True)
            return
        stopping = True
        raise Stopped(signum)

    for s in signals:
        signal.signal(s, handler)
    previous = sys.unraisablehook

    def unraisable(u: Any) -> None:
        """A stop raised while a finaliser or a weakref's callback ran (importlib's module locks have
        one) is printed as "Exception ignored" and lost, and the run went on to its end as if nothing
        had come (a Ctrl-C mid-job, seen in CI): the signal is delivered again, to land where it unwinds."""
        nonlocal stopping
        exc = u.exc_value
        if isinstance(exc, (KeyboardInterrupt, Stopped)):
            stopping = False if isinstance(exc, Stopped) else stopping
            signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
            # From another thread, a moment later: sent from here it would be raised in this hook again.
            threading.Timer(0.001, _again, (type(exc), signum)).start()
        else:
            previous(u)

    sys.unraisablehook = unraisable

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        sys.unraisablehook = previous

    return restore


# Machines a fabric runs on (issue 24) are reached by ssh, as Mininet's cluster edition reaches them.
LOCAL_MACHINES = ("localhost", "")  # this machine: no ssh
SSH_CONFIG_ENV = "EMU_SSH_CONFIG"  # an ssh configuration for every ssh of ours (the namespace cluster's)


def ssh_base() -> list[str]:
    """The ssh command line before the machine's name: the user's configuration (or EMU_SSH_CONFIG's),
    never a password prompt."""
    cfg = os.environ.get(SSH_CONFIG_ENV, "")
    return ["ssh", *(["-F", cfg] if cfg else []), "-o", "BatchMode=yes"]


def remote_module(machine: str, module: str, *args: str, options: tuple[str, ...] = ()) -> list[str]:
    """The ssh command that runs `python -m module args` on `machine` as child_env() would here: the
    same checkout, interpreter and import path at the same places (machines made from one image)."""
    env = child_env()
    line = " ".join(shlex.quote(a) for a in ("env", f"PYTHONPATH={env['PYTHONPATH']}", "PYTHONUNBUFFERED=1",
                                             *python_module(module, *args)))
    return [*ssh_base(), *options, machine, f"cd {shlex.quote(os.getcwd())} && exec {line}"]


def machine_address(machine: str) -> str:
    """The IPv4 address ssh reaches `machine` at (its configuration's HostName, resolved): where the
    machine's engine worker listens for its peers."""
    import socket

    out = subprocess.run([*ssh_base(), "-G", machine], capture_output=True, text=True, timeout=10)
    host = next((line.split()[1] for line in out.stdout.splitlines() if line.startswith("hostname ")), machine)
    try:
        return socket.gethostbyname(host)
    except OSError:
        raise ValueError(f"machine {machine!r}: cannot resolve its address {host!r}") from None


def address_towards(address: str) -> str:
    """This machine's own address on the way to `address` (where a peer reaches our worker)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))  # no packet is sent: the kernel only picks a route and a source
        return s.getsockname()[0]


def watch_owner(pid: int) -> int:
    """A pidfd that becomes readable when process `pid` (the run's owner) ends, for a child of ours
    to poll: it dies with its owner, kill -9 included, instead of running on as an orphan.
    ProcessLookupError if the owner is already gone."""
    return os.pidfd_open(pid)


def die_with_parent() -> list[str]:
    """A command prefix for a binary we cannot teach to watch its owner (simple_switch): the kernel
    kills it when the thread that started it ends (util-linux's setpriv sets the parent-death signal
    and execs). Start such binaries from the thread that owns the run."""
    import shutil

    return ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


DEATHS = "deaths.json"  # in a run folder: what died, for `emu stats` and anyone else to read


def say_death(message: str) -> None:
    """The default report of a death: one line on stderr, the moment it happens."""
    print(f"emu: {message}", file=sys.stderr, flush=True)


class Supervisor:
    """Learns of a child's death the moment it happens (a pidfd per child, one poll in one thread) and
    reports it once: through `report`, and appended to DEATHS in `run_dir`. A stop the parent asked
    for is not a death: call stop() before killing what it watches."""

    def __init__(self, run_dir: str, report: Callable[[str], None] = say_death) -> None:
        self.run_dir = run_dir
        self.report = report
        self.deaths: list[str] = []
        self._watched: dict[int, tuple[subprocess.Popen, str]] = {}  # pidfd -> (process, what it is)
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None

    def watch(self, proc: subprocess.Popen, what: str) -> None:
        """`what`: the whole line to say when it dies, less the exit status ("engine worker 1 (...)")."""
        fd = os.pidfd_open(proc.pid)
        with self._lock:
            self._watched[fd] = (proc, what)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="emu-supervisor", daemon=True)
            self._thread.start()
        os.write(self._wake_w, b"w")

    def _run(self) -> None:
        while True:
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            with self._lock:
                for fd in self._watched:
                    poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    if b"q" in os.read(self._wake_r, 256):
                        return
                    continue
                with self._lock:
                    proc, what = self._watched.pop(fd)
                os.close(fd)
                try:
                    rc: int | str = proc.wait(timeout=2)
                except subprocess.TimeoutExpired:  # another thread is reaping it
                    rc = "?"
                self._died(f"{what} died (exit {rc})")

    def _died(self, message: str) -> None:
        self.deaths.append(message)
        path = os.path.join(self.run_dir, DEATHS)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(json.dumps(message) + "\n")
        except OSError:
            pass  # the run folder is going: the report below still says it
        self.report(message)

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._wake_w, b"q")
            self._thread.join(5)
            self._thread = None
        with self._lock:
            for fd in self._watched:
                os.close(fd)
            self._watched.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1


def recorded_deaths(run_dir: str) -> list[str]:
    """What a run's supervisor recorded as dead, oldest first (read by other processes)."""
    try:
        with open(os.path.join(run_dir, DEATHS)) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []
