"""Nodes on other machines, as Mininet's cluster edition makes them (issue 24).

A host placed on another machine is Mininet's own cluster-edition `RemoteHost`: its shell is started
over ssh, in a namespace of its own on that machine, and its commands (`cmd`, `popen`) run there. A
switch placed there is a `RemoteFabricSwitch`: Mininet's `RemoteMixin` on our FabricSwitch, a shell in
that machine's root namespace, where the link ends its engine worker carries are made. Only the ssh
command is ours (`emu.launch.ssh_base`: the user's configuration or EMU_SSH_CONFIG's, machines by name);
Mininet's tunnels (RemoteLink) are not used: the engine carries every link between switches.

What FabricNet would configure over netlink here (a host's addresses, routes and sysctls; the
switch ends' MTU, offloads and state) is configured on the machine itself by the same code, run
there over ssh: `python -m emu.cluster.remote` with the plan on stdin (`configure_machine`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from mininet.examples.cluster import RemoteHost, RemoteMixin

from emu.launch import remote_module, ssh_base
from emu.net.link import LinkParams
from emu.net.netlink import Netlink
from emu.net.switch import (
    FabricSwitch,
    HostPort,
    configure_hosts,
    configure_root_side,
    raise_neighbour_limits,
)


def _sshbase() -> list[str]:
    return [*ssh_base(), "-q", "-tt"]  # as Mininet's: a terminal for the node's shell


class RemoteFabricHost(RemoteHost):
    """A host on machine `server` (Mininet's RemoteHost, reached by the machine's name with our ssh)."""

    def __init__(self, name: str, server: str, **params: Any) -> None:
        self.sshbase = _sshbase()
        super().__init__(name, server=server, serverIP=server, **params)


class RemoteFabricSwitch(RemoteMixin, FabricSwitch):
    """A fabric switch on machine `server`: its shell in that machine's root namespace (where its
    links to hosts end, for the engine worker there); the engine itself is the fabric's."""

    def __init__(self, name: str, server: str, **params: Any) -> None:
        self.sshbase = _sshbase()
        super().__init__(name, server=server, serverIP=server, **params)

    def configure_machine(self, hosts: dict[Any, list[HostPort]], root_ifs: list[str]) -> None:
        """Its machine's hosts and switch ends, configured there (BuiltFabric.configure)."""
        configure_machine(self.server, hosts, root_ifs)


@dataclass(frozen=True)
class _InNamespace:
    """A host as configure_hosts needs it, on its own machine: the pid of a process in its namespace."""

    pid: int
    inNamespace: bool = True


def configure_machine(machine: str, hosts: dict[Any, list[HostPort]], root_ifs: list[str]) -> None:
    """What BuiltFabric.configure does here, done on `machine` for its own hosts and switch ends."""
    plan = {"hosts": [[h.pid, [[p.ifname, asdict(p.params)] for p in ports]] for h, ports in hosts.items()],
            "root": root_ifs}
    r = subprocess.run(remote_module(machine, "emu.cluster.remote"), input=json.dumps(plan), text=True,
                       capture_output=True, timeout=120, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"configuring the fabric's interfaces on {machine} failed: "
                           f"{(r.stderr or r.stdout).strip()[-600:]}")


def host_addresses(machine: str, hosts: dict[str, int], family: int) -> dict[str, list[str]]:
    """Every address of each host (name -> pid of its shell on `machine`), read there over netlink."""
    r = subprocess.run(remote_module(machine, "emu.cluster.remote"), text=True, capture_output=True, timeout=60,
                       input=json.dumps({"addresses": hosts, "family": family}), check=False)
    if r.returncode != 0:
        raise RuntimeError(f"reading the hosts' addresses on {machine} failed: {(r.stderr or r.stdout).strip()[-600:]}")
    return json.loads(r.stdout)


def _addresses(hosts: dict[str, int], family: int) -> dict[str, list[str]]:
    out = {}
    for name, pid in hosts.items():
        with Netlink.of_pid(pid) as nl:
            out[name] = [a for addrs in nl.addresses(family).values() for a in addrs]
    return out


def main() -> int:
    """One request on stdin: {"addresses": {host: pid}, "family": 4|6} is answered on stdout; a plan
    ({"hosts": ..., "root": ...}) is carried out."""
    plan = json.load(sys.stdin)
    if "addresses" in plan:
        json.dump(_addresses(plan["addresses"], int(plan["family"])), sys.stdout)
        return 0
    hosts = {_InNamespace(int(pid)): [HostPort(name, LinkParams(**{**p, "host_routes4": tuple(p["host_routes4"]),
                                                                    "host_routes6": tuple(p["host_routes6"])}))
                                      for name, p in ports]
             for pid, ports in plan["hosts"]}
    raise_neighbour_limits(sum(len(p) for p in hosts.values()) * len(hosts))
    configure_root_side(plan["root"])
    configure_hosts(hosts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
