#!/usr/bin/env python3
"""BAG: buildings and regions joined over long-haul links by a super-spine.

    sudo python topologies/bag.py --regions 2 --distance 50km
    sudo mn --custom topologies/bag.py --topo bag,regions=2,distance=50km
"""

import glob
import inspect
import os
import sys

# mn --custom execs this file with Debian's python3 and no __file__: find the checkout and its venv.
_root = os.path.dirname(os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename)))
sys.path[:0] = [_root, *glob.glob(os.path.join(_root, ".venv/lib/python3*/site-packages"))]

from emu.cli.script import mn_custom, run  # noqa: E402

topos, switches, links = mn_custom("bag")

if __name__ == "__main__":
    sys.exit(run("bag"))
