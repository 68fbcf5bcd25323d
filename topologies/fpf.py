#!/usr/bin/env python3
"""Flattened Planar Fabric: every GPU on P planes, a 2-tier Clos per plane.

    sudo python topologies/fpf.py --gpus 8 --planes 8
    sudo mn --custom topologies/fpf.py --topo fpf,gpus=8,planes=2
"""

import glob
import inspect
import os
import sys

# mn --custom execs this file with Debian's python3 and no __file__: find the checkout and its venv.
_root = os.path.dirname(os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename)))
sys.path[:0] = [_root, *glob.glob(os.path.join(_root, ".venv/lib/python3*/site-packages"))]

from emu.cli.script import mn_custom, run  # noqa: E402

topos, switches, links = mn_custom("fpf")

if __name__ == "__main__":
    sys.exit(run("fpf"))
