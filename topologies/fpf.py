#!/usr/bin/env python3
"""Flattened Planar Fabric on the native engine.

    sudo python topologies/fpf.py --gpus 8 --planes 8
    sudo mn --custom topologies/fpf.py --topo fpf,gpus=8,planes=2
"""

import glob
import inspect
import os
import sys

# `mn --custom` execs this file without __file__ and with Debian's python3:
# find the checkout from the code object, and the project's venv beside it.
_here = os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename))
_root = os.path.dirname(_here)
sys.path[:0] = [_root, *glob.glob(os.path.join(_root, ".venv/lib/python3*/site-packages"))]

from emu.net.link import FabricLink  # noqa: E402
from emu.net.switch import FabricSwitch  # noqa: E402
from emu.topo.fpf import FPFTopo  # noqa: E402

# What `mn --custom` picks up: the topology, and the engine-backed classes by name.
topos = {"fpf": FPFTopo}
switches = {"fabric": FabricSwitch}
links = {"fabric": FabricLink}

if __name__ == "__main__":
    from emu.cli.main import main

    sys.exit(main(["up", "fpf", *sys.argv[1:]]))
