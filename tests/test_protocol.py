"""The engine's control protocol: typed requests survive the wire; anything else is refused."""

from __future__ import annotations

import pytest

from emu.dataplane.protocol import (
    REQUESTS,
    Ping,
    Probe,
    ProtocolError,
    SampleQueues,
    SetPort,
    SetTables,
    decode,
    encode,
)


@pytest.mark.parametrize("msg", [Ping(), SetPort("p0l0", "p0l0-eth1", False), Probe("s", "s-eth0", 3, 0.01),
                                 SetTables("p0l0", {"routes": [], "groups": []}),
                                 SampleQueues([["p0l0", "p0l0-eth3"]], 1e-5)])
def test_every_request_round_trips(msg):
    assert decode(encode(msg)) == msg


def test_unknown_types_and_fields_are_refused_not_guessed():
    with pytest.raises(ProtocolError, match="unknown request type"):
        decode(b'{"type": "Reboot"}\n')
    with pytest.raises(ProtocolError, match="unknown field"):
        decode(b'{"type": "SetPort", "switch": "a", "port": "b", "up": true, "force": 1}\n')
    with pytest.raises(ProtocolError, match="SetPort"):
        decode(b'{"type": "SetPort", "switch": "a"}\n')
    with pytest.raises(ProtocolError, match="not JSON"):
        decode(b"{nope\n")
    assert set(REQUESTS) >= {"Ping", "Stats", "SetPort", "SetTables", "Stop"}


def test_a_job_kind_is_named_by_its_class_and_nothing_else_is_run():
    """A request names a job kind by its class ("module:Class"): no table to extend for a new kind, and no
    request can make a worker import or call anything that is not a Job of the emu package."""
    from emu.collectives.job import CollectiveJob
    from emu.dataplane.worker import job_class

    assert CollectiveJob.kind() == "emu.collectives.job:CollectiveJob"
    assert job_class(CollectiveJob.kind()) is CollectiveJob
    for bad, why in (("os:system", "emu package"), ("emu.collectives.job", "emu package"),
                     ("emu.collectives.job:Nope", "no job kind"), ("emu.nope:Job", "no job kind"),
                     ("emu.collectives.job:Ring", "not a Job")):
        with pytest.raises(ValueError, match=why):
            job_class(bad)
