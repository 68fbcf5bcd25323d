"""What the engine is asked to run: switches, ports, QoS and tables, in fabric units.

The control plane (or a test) builds an EngineSpec; the engine writes it as
JSON for its worker processes. Everything is validated here, before a
single process or socket exists.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from emu.clock import ClockKind, check_clock
from emu.control.model import SwitchTables
from emu.dataplane.core import CORES
from emu.simtime import NEVER, to_ps
from emu.units import Dilation

# "p4": the port faces a P4 switch's port on this machine (a veth to simple_switch), when the
# engine carries a BMv2 fabric's links as wires: frames cross it unshaped, in both directions.
PEER_KINDS = ("host", "switch", "p4")


class SpecError(ValueError):
    """The engine was asked for something impossible; the message says what."""


@dataclass(frozen=True)
class EcnSpec:
    """RED marking on one egress queue, in bytes of queue depth."""

    kmin: int = 100_000
    kmax: int = 400_000
    pmax: float = 0.2

    def __post_init__(self) -> None:
        if not 0 <= self.kmin <= self.kmax:
            raise SpecError(f"ECN needs 0 <= kmin <= kmax, got {self.kmin}, {self.kmax}")
        if not 0 <= self.pmax <= 1:
            raise SpecError(f"ECN pmax must be in [0, 1], got {self.pmax}")


def _default_dscp() -> list[int]:
    # DSCP 26 (AF31) carries RoCE in the lossless class 3; 48 (CS6) CNPs in 6;
    # 56 (CS7) network control in 7; everything else best effort 0.
    m = [0] * 64
    m[26] = 3
    m[24] = 3
    m[48] = 6
    m[56] = 7
    return m


@dataclass(frozen=True)
class TrimSpec:
    """Packet trimming (NDP; Ultra Ethernet; SAI's trim size, DSCP and queue): an IP packet of a
    trimmable DSCP (`classes`) that the buffer would drop is cut to `size` bytes after its Ethernet
    header, its DSCP set to `dscp`, and queued in egress queue `queue` (one of the strict-priority
    ones) while that queue holds under `cap_bytes`; past the cap it is dropped and counted. The
    trimmed header is not charged to the shared buffer: the header queue is its own. PFC is off for
    the trimmable classes' traffic classes (a trimmed class is lossy by design)."""

    size: int = 64
    dscp: int = 11
    classes: tuple[int, ...] = (24,)  # MetaRoCE's data in trimming mode (its ACKs keep DSCP 26)
    queue: int = 7
    cap_bytes: int = 64 << 10

    def __post_init__(self) -> None:
        if not 48 <= self.size <= 1500:
            raise SpecError(f"trim size must be 48..1500 bytes after the Ethernet header (IPv6 + UDP is 48), "
                            f"got {self.size}")
        if not 0 <= self.dscp < 64 or any(not 0 <= d < 64 for d in self.classes):
            raise SpecError(f"trim DSCPs must be in 0..63, got {self.dscp} and {self.classes}")
        if self.dscp in self.classes:
            raise SpecError(f"the trimmed DSCP {self.dscp} cannot itself be trimmable")
        if not 0 <= self.queue < 8 or self.cap_bytes <= 0:
            raise SpecError(f"trim queue must be 0..7 and its cap > 0, got {self.queue}, {self.cap_bytes}")


@dataclass(frozen=True)
class QosSpec:
    dscp_to_tc: tuple[int, ...] = field(default_factory=lambda: tuple(_default_dscp()))
    lossless: tuple[int, ...] = (3,)
    pfc: bool = True
    ecn: dict[int, EcnSpec] = field(default_factory=lambda: {3: EcnSpec(), 0: EcnSpec()})
    buffer_per_port: int = 1 << 20
    reserve: int = 1024
    alpha_shift: int = 3
    strict: tuple[int, ...] = (7, 6)
    weights: tuple[int, ...] = (1, 1, 1, 1, 1, 1, 1, 1)
    host_nic_limit: int = 64 << 20
    trim: TrimSpec | None = None

    def __post_init__(self) -> None:
        if self.trim is not None and self.trim.queue not in self.strict:
            raise SpecError(f"the trim queue {self.trim.queue} must be a strict-priority one ({self.strict})")
        if len(self.dscp_to_tc) != 64 or any(not 0 <= t < 8 for t in self.dscp_to_tc):
            raise SpecError("dscp_to_tc needs 64 traffic classes in 0..7")
        if any(not 0 <= t < 8 for t in self.lossless):
            raise SpecError(f"lossless classes must be in 0..7, got {self.lossless}")
        if self.buffer_per_port <= 0:
            raise SpecError(f"buffer_per_port must be > 0, got {self.buffer_per_port}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ecn"] = {str(k): asdict(v) for k, v in self.ecn.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QosSpec:
        d = dict(d)
        d["ecn"] = {int(k): EcnSpec(**v) for k, v in d.get("ecn", {}).items()}
        if d.get("trim") is not None:
            d["trim"] = TrimSpec(**{**d["trim"], "classes": tuple(d["trim"]["classes"])})
        for key in ("dscp_to_tc", "lossless", "strict", "weights"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass(frozen=True)
class PortSpec:
    """One switch port and the directed link leaving it (fabric units)."""

    index: int
    ifname: str
    mac: str
    rate_bps: float
    delay_s: float
    peer_kind: str
    peer_mac: str = ""
    peer_switch: str = ""
    peer_port: int = -1
    ipv4: tuple[str, ...] = ()
    ipv6: tuple[str, ...] = ()
    headroom: int = 0
    # A host port whose host another worker runs (its NIC, kernel interface and endpoints: a host with
    # planes on two machines), or -1: the switch's own. The cable is then cut as a link between
    # switches is: a channel, whose lookahead is the cable's delay.
    host_worker: int = -1
    # A host port whose host has a kernel (a veth to it, a packet socket here); False: the host is only the
    # jobs the engine runs (RunSettings.kernel False), and what would go to its kernel is dropped, counted.
    kernel: bool = True

    def to_dict(self) -> dict[str, Any]:
        """As dataclasses.asdict gives it, without its deep copies (6 s of FPF 4096 x 8's 65 536 ports under
        the profiler; tests/test_control.py holds the two equal)."""
        return {f: getattr(self, f) for f in _PORT_FIELDS}

    def __post_init__(self) -> None:
        if not self.kernel and self.peer_kind != "host":
            raise SpecError(f"{self.ifname}: only a host port can face a host with no kernel")
        if self.host_worker >= 0 and self.peer_kind != "host":
            raise SpecError(f"{self.ifname}: only a host port's host runs on a worker of its own")
        if self.peer_kind not in PEER_KINDS:
            raise SpecError(f"{self.ifname}: peer_kind must be one of {PEER_KINDS}")
        if not self.rate_bps > 0:
            raise SpecError(f"{self.ifname}: rate must be > 0, got {self.rate_bps}")
        if self.delay_s < 0:
            raise SpecError(f"{self.ifname}: delay must be >= 0, got {self.delay_s}")
        if self.peer_kind == "switch" and (not self.peer_switch or self.peer_port < 0):
            raise SpecError(f"{self.ifname}: a switch peer needs peer_switch and peer_port")


_PORT_FIELDS = tuple(f.name for f in fields(PortSpec))


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    ports: tuple[PortSpec, ...]
    tables: SwitchTables = field(default_factory=SwitchTables)
    qos: QosSpec = field(default_factory=QosSpec)
    loopback4: str = ""
    loopback6: str = ""
    worker: int = 0
    seed: int = 0
    # A wire box instead of a switch: a frame entering port i leaves by port wires[i], with no
    # lookup. How the engine carries another data plane's links (BMv2's) with its link model.
    wires: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for i, p in enumerate(self.ports):
            if p.index != i:
                raise SpecError(f"{self.name}: port {p.ifname} has index {p.index}, expected {i}")
        if self.wires and (len(self.wires) != len(self.ports)
                           or any(not 0 <= w < len(self.ports) or w == i or self.wires[w] != i for i, w in enumerate(self.wires))):
            raise SpecError(f"{self.name}: wires must pair every port with another, both ways; got {self.wires}")
        self.tables.validate()
        for g in self.tables.groups:
            for m in g.members:
                if m.port >= len(self.ports):
                    raise SpecError(f"{self.name}: group {g.id} uses port {m.port} it does not have")


@dataclass(frozen=True)
class EngineSpec:
    switches: tuple[SwitchSpec, ...]
    dilation: float = 1000.0
    run_dir: str = "/run/emu"
    pcap_dir: str = ""
    workers: int = 1
    # Every worker's loop keeps fabric seconds (emu.dataplane.loop.EngineLoop). "fabric": a job's events as
    # fast as the CPU allows (dilation must be 1), and `idle_dilation` maps the wall clock to fabric time
    # while no job of ours runs (kernel traffic only). "wall": paced at `dilation`, jobs or not.
    clock: ClockKind = ClockKind.WALL  # a name given is made the kind (emu.clock.check_clock)
    idle_dilation: float = 1000.0
    # Paced: the instant (wall seconds on the workers' common clock, emu.dataplane.channel.common_offset)
    # at which fabric time is 0 on every worker, so that their pacers agree; set when the engine starts.
    origin: float = -1.0
    # A split fabric (either clock): where each worker runs and listens for its channels (its machine's
    # address; none: this machine, on loopback), and its machine's name, for errors.
    hosts: tuple[str, ...] = ()
    machines: tuple[str, ...] = ()
    core: str = "python"  # which core runs the hot path (emu.dataplane.core): "python" or "native"

    def __post_init__(self) -> None:
        Dilation(self.dilation)
        if self.core not in CORES:
            raise SpecError(f"core must be one of {', '.join(CORES)}, got {self.core!r}")
        try:
            object.__setattr__(self, "clock", check_clock(self.clock))
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        if not self.clock.paced and self.dilation != 1.0:
            raise SpecError("the fabric clock runs its switches at dilation 1")
        for what in (self.hosts, self.machines):
            if what and len(what) != self.workers:
                raise SpecError(f"hosts and machines name every worker: {self.workers}, got {len(what)}")
        names = [s.name for s in self.switches]
        if len(set(names)) != len(names):
            raise SpecError("switch names must be unique")
        by_name = {s.name: s for s in self.switches}
        for s in self.switches:
            if not 0 <= s.worker < self.workers:
                raise SpecError(f"{s.name}: worker {s.worker} outside 0..{self.workers - 1}")
            for p in s.ports:
                if p.host_worker >= self.workers or (p.host_worker >= 0 and not self.channelled):
                    raise SpecError(f"{s.name}/{p.ifname}: its host's worker {p.host_worker} must be one of "
                                    f"0..{self.workers - 1}, of workers joined by channels")
                if p.peer_kind == "switch":
                    peer = by_name.get(p.peer_switch)
                    if peer is None or p.peer_port >= len(peer.ports):
                        raise SpecError(f"{s.name}/{p.ifname}: peer {p.peer_switch}:{p.peer_port} does not exist")
        if self.workers > 1 and self.lookahead_ps() <= 0:  # as the windows keep it: whole picoseconds
            raise SpecError("a fabric split over workers needs a propagation delay > 0 on every link between "
                            "them: that delay is how far one worker may run ahead of another")

    @property
    def paced(self) -> bool:
        """The wall clock: every worker's loop paced at D (emu.dataplane.loop.EngineLoop), in fabric seconds
        as on the fabric clock."""
        return self.clock.paced

    @property
    def channelled(self) -> bool:
        """Whether the links between workers are channels (emu.dataplane.channel): whenever there are
        several, on either clock and on one machine or several. Each host then runs whole on one worker
        (PortSpec.host_worker), so the project's endpoints run inside the engine however it is split."""
        return self.workers > 1

    def cut_links(self) -> list[tuple[str, PortSpec]]:
        """The ports (switch, port) whose peer another worker runs: a switch, or a host (host_worker)."""
        owner = {s.name: s.worker for s in self.switches}
        return [(s.name, p) for s in self.switches for p in s.ports
                if (p.peer_kind == "switch" and owner[p.peer_switch] != s.worker)
                or p.host_worker not in (-1, s.worker)]

    @staticmethod
    def host_side(s: SwitchSpec, p: PortSpec) -> int:
        """The worker that runs the host behind host port `p` of switch `s`."""
        return p.host_worker if p.host_worker >= 0 else s.worker

    def lookahead_ps(self) -> int:
        """How far a worker may run ahead of another: the least delay of the links between them, in
        picoseconds as the channels keep it (each cut cable's delay rounded as the switch at its end rounds
        it); NEVER where no link is cut."""
        return min((to_ps(p.delay_s) for _, p in self.cut_links()), default=NEVER)

    def channel_host(self, worker: int) -> str:
        return self.hosts[worker] if self.hosts else "127.0.0.1"

    def worker_name(self, worker: int) -> str:
        """Worker i as errors name it: with its machine when the fabric spans machines."""
        return f"{worker} (on {self.machines[worker]})" if self.machines else str(worker)

    def to_json(self) -> str:
        qos: dict[int, dict[str, Any]] = {}  # by object: a fabric's switches share one QosSpec (asdict each time
        # was 1.7 s of FPF 4096 x 8's spec under the profiler)
        return json.dumps(
            {
                "dilation": self.dilation,
                "run_dir": self.run_dir,
                "pcap_dir": self.pcap_dir,
                "workers": self.workers,
                "clock": self.clock,
                "idle_dilation": self.idle_dilation,
                "origin": self.origin,
                "hosts": list(self.hosts),
                "machines": list(self.machines),
                "core": self.core,
                "switches": [
                    {
                        "name": s.name,
                        "worker": s.worker,
                        "seed": s.seed,
                        "wires": list(s.wires),
                        "loopback4": s.loopback4,
                        "loopback6": s.loopback6,
                        "ports": [p.to_dict() for p in s.ports],
                        "tables": s.tables.to_dict(compact=True),
                        "qos": qos[id(s.qos)] if id(s.qos) in qos else qos.setdefault(id(s.qos), s.qos.to_dict()),
                    }
                    for s in self.switches
                ],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> EngineSpec:
        d = json.loads(text)
        switches = tuple(
            SwitchSpec(
                name=s["name"],
                worker=s["worker"],
                seed=s["seed"],
                wires=tuple(s.get("wires", ())),
                loopback4=s["loopback4"],
                loopback6=s["loopback6"],
                ports=tuple(
                    PortSpec(**{**p, "ipv4": tuple(p["ipv4"]), "ipv6": tuple(p["ipv6"])})
                    for p in s["ports"]
                ),
                tables=SwitchTables.from_dict(s["tables"]),
                qos=QosSpec.from_dict(s["qos"]),
            )
            for s in d["switches"]
        )
        return cls(
            switches=switches,
            dilation=d["dilation"],
            run_dir=d["run_dir"],
            pcap_dir=d["pcap_dir"],
            workers=d["workers"],
            clock=d.get("clock", ClockKind.WALL),
            idle_dilation=d.get("idle_dilation", 1000.0),
            origin=d.get("origin", -1.0),
            hosts=tuple(d.get("hosts", ())),
            machines=tuple(d.get("machines", ())),
            core=d.get("core", "python"),
        )
