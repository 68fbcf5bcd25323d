"""What the seeds' scale (FPF 4096 GPUs x 8 planes) needs of the parts that are not the data plane: it can be
described, it fits this kind of machine without the hosts' kernels, and a worker's large reply arrives whole.
No root: these run without a fabric (docs/performance.md has the runs themselves)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from emu.dataplane.worker import _send_progressing
from emu.topo import common
from emu.topo.fpf import FPFTopo


def test_fpf_4096_x_8_is_described_and_fits_24_gib_without_the_hosts_kernels(monkeypatch):
    monkeypatch.setattr(common, "mem_available", lambda: 24 << 30)  # the project's kind of machine
    topo = FPFTopo(gpus=4096, leaves=128, spines=32, radix=128)
    assert len(topo.hosts()) == 4096 and len(topo.links()) == 65_536
    topo.check_fits(kernel=False)
    with pytest.raises(common.TopologyError, match="32768 switch links and 32768 host links need about"):
        topo.check_fits()  # with a namespace and veths a host: not on one machine


def _slow_reader(sock: socket.socket, out: list[int]) -> None:
    got = 0
    while chunk := sock.recv(1 << 16):
        got += len(chunk)
        time.sleep(0.002)  # slower in all than the sender's timeout, never stopped for long
    out.append(got)


@pytest.mark.parametrize("send", ["progressing", "sendall"])
def test_a_large_reply_reaches_a_reader_slower_than_the_timeout_in_all(send):
    """The 40 MB of FPF 4096 x 8's stats were cut by sendall's timeout, which bounds the whole reply; a send
    that makes progress within its timeout is not. (sendall is shown to fail the same way.)"""
    a, b = socket.socketpair()
    a.settimeout(0.2)
    out: list[int] = []
    reader = threading.Thread(target=_slow_reader, args=(b, out))
    reader.start()
    data = b"x" * (8 << 20)
    try:
        if send == "progressing":
            _send_progressing(a, data)
        else:
            with pytest.raises(TimeoutError):
                a.sendall(data)
    finally:
        a.close()
        reader.join()
        b.close()
    if send == "progressing":
        assert out == [len(data)]
    else:
        assert out[0] < len(data)
