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

import os
import stat
import sys
import tempfile

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


def process_start(pid: int) -> int:
    """When process `pid` started (clock ticks since boot): with the pid, which process it is."""
    return proc_stat(pid, 19)


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
