"""A user's own P4 program on the BMv2 backend: compiled once, run by every switch, tables from a hook.

`emu up TOPO --backend bmv2 --p4 PROG.p4 --p4-tables HOOK.py` (RunSettings p4, p4_tables): the
program is compiled with p4c-bm2-ss into a scratch folder that is removed at once (the JSON is
kept in memory, then written into the run's own directory, which goes with the run), so nothing
lands in the user's folder. HOOK.py defines `tables(switch: SwitchFacts) -> list[str]`: the
simple_switch_CLI commands (`table_add ...`, `register_write ...`) for one switch, given the
topology's facts as this module lays them out. fabric.p4's own control plane (routes, groups,
PFC, ECN, trimming) does not apply to such a program; docs/p4.md says what still runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from emu.launch import scratch_dir

P4C = "p4c-bm2-ss"


class P4ProgramError(RuntimeError):
    """The user's program does not compile, or their table hook does not load or fails: one line."""


@dataclass(frozen=True)
class PortFacts:
    """One port of a switch and what is at its other end."""

    port: int  # BMv2's port number: what `standard_metadata.egress_spec` and table entries use
    ifname: str
    mac: str  # this port's MAC: the source MAC of what leaves by it (hosts have it as their gateway's)
    peer: str  # the node at the other end: a switch or a host
    peer_kind: str  # "switch" or "host"
    peer_mac: str  # the MAC of the peer's interface: the destination MAC of what leaves by this port
    peer_port: int = 0  # a switch peer: its BMv2 port at the other end; a host: 0
    peer_ipv4: tuple[str, ...] = ()  # a host: its address on this link; a switch: its loopback (no prefix)
    peer_ipv6: tuple[str, ...] = ()
    gateway_ipv4: str = ""  # a host port: the address the host has as its gateway here (the switch's)
    gateway_ipv6: str = ""
    rate_bps: float = 0.0
    delay_s: float = 0.0


@dataclass(frozen=True)
class HostAddress:
    """One address of a host, where it attaches: `switch`'s BMv2 port `port` (facing the host)."""

    host: str
    address: str  # IPv4 or IPv6, no prefix length
    mac: str  # the host interface's MAC
    switch: str
    port: int


@dataclass(frozen=True)
class SwitchFacts:
    """What a table hook is told about one switch and the fabric around it."""

    name: str
    device_id: int  # BMv2's --device-id
    plane: int | None  # the switch's plane (FPF) or shard; None where the topology has none
    loopback4: str
    loopback6: str
    ports: tuple[PortFacts, ...]
    hosts: tuple[HostAddress, ...]  # every host address of the fabric, each where it attaches
    # Destination prefix (every host address, loopback and SID, as /32 or /128) -> this switch's BMv2
    # ports on its shortest paths: the equal-cost next hops the project's own control plane computed
    # (weights dropped), so a hook need not search the graph itself.
    next_hops: dict[str, tuple[int, ...]]

    @property
    def host_ports(self) -> tuple[PortFacts, ...]:
        return tuple(p for p in self.ports if p.peer_kind == "host")

    def port(self, number: int) -> PortFacts:
        """The port of BMv2 number `number`."""
        for p in self.ports:
            if p.port == number:
                return p
        raise KeyError(f"{self.name} has no port {number}")


_COMPILED: dict[str, str] = {}  # digest of what p4c reads -> JSON text: a check and the start compile once
_LINEMARKER = re.compile(r'^# \d+ "((?:[^"\\]|\\.)*)"', re.M)


def _p4c_args(source: Path) -> list[str]:
    """p4c's options for the program, but the output: what the preprocessor and the compiler are given."""
    return [P4C, "--std", "p4-16", "-I", str(source.resolve().parent), str(source)]


def dependencies(source: Path) -> list[Path] | None:
    """Every file the program reads, itself first: the files the preprocessor entered, as its line
    markers name them (p4c -E; its -M exits 1 and writes a make rule), whatever folder they are in (a
    header beside it, one given by a path, p4c's own core.p4 and v1model.p4). None where preprocessing
    fails (a missing header): the compile that follows says why."""
    r = subprocess.run([*_p4c_args(source)[:-1], "-E", str(source)], capture_output=True, text=True, timeout=120)
    said = [line for line in r.stderr.splitlines() if "error" in line.lower() and "warning" not in line.lower()]
    if said or not r.stdout:  # p4c -E exits 1 after a good preprocessing too: its code says nothing
        return None
    out: list[Path] = []
    for name in _LINEMARKER.findall(r.stdout):
        name = name.replace('\\"', '"').replace("\\\\", "\\")
        if name.startswith("<") and name.endswith(">"):  # <built-in>, <command-line>
            continue
        path = Path(os.path.realpath(name))  # relative names are the working folder's, as p4c's
        if path not in out:
            out.append(path)
    return out


def _digest(source: Path) -> str | None:
    """What the compile's output depends on: the compiler (path, size and time: a reinstalled p4c
    compiles again), its options, and every file the program includes, named and read. None where the
    files cannot be known (the compile is then not kept)."""
    files = dependencies(source)
    if files is None:
        return None
    compiler = shutil.which(P4C) or ""
    stat = os.stat(compiler) if compiler else None
    h = hashlib.sha256("\0".join(_p4c_args(source)).encode() + b"\0" + compiler.encode()
                       + (f"{stat.st_size}:{stat.st_mtime_ns}".encode() if stat else b""))
    for p in files:
        try:
            body = p.read_bytes()
        except OSError:
            return None
        h.update(b"\0" + str(p).encode() + b"\0" + hashlib.sha256(body).digest())
    return h.hexdigest()


def first_error(stderr: str) -> str:
    """p4c's first error in one line: the line that names the file and line, with what it says."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() and "errors encountered" not in line and "warning" not in line.lower():
            return line
    return lines[0] if lines else "no message"


def compile_program(path: str) -> str:
    """The program at `path` compiled for simple_switch: its JSON text. p4c writes into a private
    scratch folder, removed before this returns, whatever happens."""
    source = Path(path)
    if not source.is_file():
        raise P4ProgramError(f"--p4 {path}: no such file")
    if shutil.which(P4C) is None:
        raise P4ProgramError(f"--p4 {path}: {P4C} not found: install p4c (README, BMv2 and p4c)")
    key = _digest(source)
    if key is not None and key in _COMPILED:
        return _COMPILED[key]
    where = scratch_dir("p4c") if os.geteuid() == 0 else tempfile.mkdtemp(prefix="p4c-")
    try:
        out = os.path.join(where, "program.json")
        args = _p4c_args(source)
        r = subprocess.run([*args[:-1], "-o", out, args[-1]], capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not os.path.isfile(out):
            raise P4ProgramError(f"--p4 {path} does not compile: {first_error(r.stderr + r.stdout)}")
        with open(out) as f:
            text = f.read()
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if key is not None:
        _COMPILED[key] = text
    return text


# (resolved path, sha256 of its text) -> its `tables`: the hook runs as root, so its module is executed
# once per process however often it is asked for (the CLI's check, FabricNet.build's, batchStartup's and
# the start each ask); an edited file is a new key, so it is imported again.
_HOOKS: dict[tuple[str, str], Callable[[SwitchFacts], list[str]]] = {}
# (the hook's key, sha256 of a switch's facts) -> its commands: what the hook returned for the same facts
# is reused, not asked again (a FabricNet started twice in one process, a second start of the same fabric).
_TABLES: dict[tuple[tuple[str, str], str], list[str]] = {}


def _hook_key(path: str) -> tuple[str, str]:
    """What determines the hook's module: the file it is and its text."""
    real = os.path.realpath(path)
    with open(real, "rb") as f:
        return real, hashlib.sha256(f.read()).hexdigest()


def load_hook(path: str) -> Callable[[SwitchFacts], list[str]]:
    """HOOK.py's `tables` function; a file that is missing, does not import or has none is said here,
    before anything is built. Imported once per text (_HOOKS): later calls return the same function."""
    if not os.path.isfile(path):
        raise P4ProgramError(f"--p4-tables {path}: no such file")
    key = _hook_key(path)
    if key in _HOOKS:
        return _HOOKS[key]
    spec = importlib.util.spec_from_file_location(f"emu_p4_tables_{Path(path).stem}", path)
    if spec is None or spec.loader is None:
        raise P4ProgramError(f"--p4-tables {path}: cannot be imported as Python")
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: a dataclass in the hook looks its module up there
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise P4ProgramError(f"--p4-tables {path} does not import: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, "tables", None)
    if not callable(fn):
        raise P4ProgramError(f"--p4-tables {path} defines no function tables(switch) -> list[str]")
    _HOOKS[key] = fn
    return fn


def _facts_digest(facts: SwitchFacts) -> str:
    """Everything the hook is told about one switch, as one digest (the dataclasses' repr is their fields,
    in order; next_hops is built in the routes' order)."""
    return hashlib.sha256(repr(facts).encode()).hexdigest()


def hook_tables(path: str, facts: SwitchFacts) -> list[str]:
    """The commands of the hook at `path` for one switch: the hook loaded once (load_hook) and asked once
    for the same facts (_TABLES); its failure is one line naming the switch (run_hook)."""
    hook = load_hook(path)
    key = (_hook_key(path), _facts_digest(facts))
    if key not in _TABLES:
        _TABLES[key] = run_hook(hook, facts, path)
    return list(_TABLES[key])


def run_hook(hook: Callable[[SwitchFacts], list[str]], facts: SwitchFacts, path: str) -> list[str]:
    """The hook's commands for one switch; any exception it raises, or a result that is not a list of
    strings, becomes one line naming the switch."""
    try:
        out = hook(facts)
    except Exception as exc:
        raise P4ProgramError(f"{facts.name}: the table hook {path} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, (list, tuple)) or not all(isinstance(c, str) for c in out):
        raise P4ProgramError(f"{facts.name}: the table hook {path} returned {type(out).__name__}, "
                             "not a list of simple_switch_CLI commands (strings)")
    return [c for c in out if c.strip()]


def _bare(address: str) -> str:
    return str(ipaddress.ip_interface(address).ip) if address else ""


def switch_facts(switches: list, specs: list, attachments: list, bmv2_port: Callable[[int], int]) -> list[SwitchFacts]:
    """Each switch's facts, from the Mininet switches, their specs (EngineSpec.switches, in the same
    order) and the control plane's attachments (where each host address and loopback hangs)."""
    by_name = {s.name: s for s in specs}
    loopbacks = {s.name: (s.loopback4, s.loopback6) for s in specs}
    port_host: dict[tuple[str, int], str] = {}
    out_hosts: list[HostAddress] = []
    for sw, spec in zip(switches, specs, strict=True):
        for p in spec.ports:
            if p.peer_kind == "host":
                port_host[(sw.name, p.index)] = _peer_node(sw, p.ifname)
    for a in attachments:
        if a.port >= 0 and (a.switch, a.port) in port_host:
            out_hosts.append(HostAddress(port_host[(a.switch, a.port)], _bare(a.prefix), a.mac, a.switch,
                                         bmv2_port(a.port)))
    facts = []
    for n, (sw, spec) in enumerate(zip(switches, specs, strict=True)):
        ports = []
        for p in spec.ports:
            if p.peer_kind == "switch":
                far = by_name[p.peer_switch].ports[p.peer_port]
                lo4, lo6 = loopbacks[p.peer_switch]
                ports.append(PortFacts(bmv2_port(p.index), p.ifname, p.mac, p.peer_switch, "switch", far.mac,
                                       bmv2_port(p.peer_port), tuple(a for a in (lo4,) if a),
                                       tuple(a for a in (lo6,) if a), rate_bps=p.rate_bps, delay_s=p.delay_s))
            else:
                mine = [h for h in out_hosts if h.switch == sw.name and h.port == bmv2_port(p.index)]
                ports.append(PortFacts(bmv2_port(p.index), p.ifname, p.mac, port_host[(sw.name, p.index)], "host",
                                       p.peer_mac, 0, tuple(h.address for h in mine if ":" not in h.address),
                                       tuple(h.address for h in mine if ":" in h.address),
                                       _bare(p.ipv4[0]) if p.ipv4 else "", _bare(p.ipv6[0]) if p.ipv6 else "",
                                       rate_bps=p.rate_bps, delay_s=p.delay_s))
        groups = {g.id: g for g in spec.tables.groups}
        hops = {str(ipaddress.ip_network(r.prefix, strict=False)):
                tuple(sorted({bmv2_port(m.port) for m in groups[r.group].members})) for r in spec.tables.routes}
        facts.append(SwitchFacts(sw.name, n, getattr(sw, "shard", None), spec.loopback4, spec.loopback6,
                                 tuple(ports), tuple(out_hosts), hops))
    return facts


def _peer_node(sw, ifname: str) -> str:
    intf = sw.intf(ifname)
    link = intf.link
    return (link.intf2 if link.intf1 is intf else link.intf1).node.name


__all__ = ["HostAddress", "P4ProgramError", "PortFacts", "SwitchFacts", "compile_program", "first_error",
           "dependencies", "hook_tables", "load_hook", "run_hook", "switch_facts"]
