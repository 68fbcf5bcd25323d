"""What the files in topologies/ share: `mn --custom` names, and running as a plain script."""

from __future__ import annotations

import sys

from emu.net.link import FabricLink
from emu.net.switch import FabricSwitch
from emu.topo import TOPOLOGIES


def mn_custom(name: str) -> tuple[dict, dict, dict]:
    """(topos, switches, links) as `mn --custom` reads them from a custom file."""
    return {name: TOPOLOGIES[name]}, {"fabric": FabricSwitch}, {"fabric": FabricLink}


def run(name: str) -> int:
    """`python topologies/NAME.py [params] [--test pingall]` is `emu up NAME ...`."""
    from emu.cli.main import main

    return main(["up", name, *sys.argv[1:]])
