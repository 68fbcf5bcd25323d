"""Break one mechanism at a time in a scratch worktree, run the test that guards it, expect it to fail.

    git worktree add /tmp/mut HEAD --detach
    sudo .venv/bin/python tools/mutate.py /tmp/mut [ITEM ...]

Issue 14's items: each line names the mechanism broken and the test that must fail. The worktree is
reset after each; this checkout is never touched. docs/testing.md has the last results.
"""
import os
import subprocess
import sys
import sysconfig
import time

WT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit(__doc__)
PY = sys.executable
SITE = sysconfig.get_paths()["purelib"]  # mn --custom runs the system Python: give it the venv's packages
M = [
 ("1", "emu/topo/fpf.py", 'self.addHost(f"gpu{g}", ip=f"{host_ip4(0, leaf, slot)}/24")',
  'self.addHost(f"gpu{g}", ip=f"{host_ip4(0, leaf, slot) if g != 2 else \'10.0.9.9\'}/24")',
  "tests/test_cli.py::test_mn_custom_runs_the_same_topology", "gpu2's address unrouted: 2 of 6 pings fail"),
 ("5", "emu/scenarios/fpf_vs_nsf.py", "racks_per_pod=2, fsw=2, spines=1,", "racks_per_pod=2, fsw=1, spines=1,",
  "tests/test_scenarios.py::test_fpf_has_fewer_hops_and_lower_rtt_than_nsf", "NSF built with one fabric switch per pod"),
 ("6", "emu/scenarios/plane_down.py", 'net.wait_forwarded(f"p{failed}l0", int(self.at * nbytes))', 'net.wait_forwarded(f"p{failed}l0", 0)',
  "tests/test_scenarios.py::test_plane_down_other_planes_carry_on", "the plane fails before its traffic starts"),
 ("7", "emu/traffic/udp.py", "count = (nbytes + size - 1) // size", "count = (nbytes + size - 1) // size - 1",
  "tests/test_scenarios.py::test_incast_pfc_is_what_makes_it_lossless", "each sender sends one datagram fewer than planned"),
 ("8", "emu/control/routes.py", "usable = min(rate, cap[nbr])", "usable = rate",
  "tests/test_scenarios.py::test_wcmp_shares_follow_capacity_and_damping_cuts_updates", "weights ignore what a next hop can pass on"),
 ("9", "emu/cli/doctor.py", '"netns": root and _netns(),', '"netns": False,',
  "tests/test_cli.py::test_doctor_reports_every_capability", "doctor reports no namespaces"),
 ("10", "emu/dataplane/link.py", "arrive = end + self.delay", "arrive = end + 2 * self.delay",
  "tests/test_engine_ns.py::test_kernel_ping_crosses_the_engine_with_the_configured_delay", "the link applies its delay twice"),
 ("11", "emu/dataplane/engine.py", "        if self.supervisor is not None:  # what follows is asked for, not a death", "        self.procs = []\n        if self.supervisor is not None:",
  "tests/test_api.py::test_ten_lines_ping_every_plane_then_fail_one", "stop() leaves the workers running (and clean() would remove them: the fixture's own snapshot must see it)"),
 ("12", "emu/net/fabric.py", 'do {once} && echo OK $a ||', 'do false && echo OK $a ||',
  "tests/test_cli.py::test_up_fpf_pingall_all_planes_zero_loss", "every first ping fails, the retry answers"),
]
only = sys.argv[2:]
for key, path, old, new, test, what in M:
    if only and key not in only:
        continue
    subprocess.run(["git", "-C", WT, "checkout", "-q", "--", "."], check=True)
    f = os.path.join(WT, path)
    s = open(f).read()
    assert s.count(old) == 1, (key, path, s.count(old))
    open(f, "w").write(s.replace(old, new))
    t0 = time.time()
    r = subprocess.run([PY, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], cwd=WT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=WT + ":" + SITE))
    tail = [x for x in r.stdout.splitlines() if x.startswith("E ") or "passed" in x or "failed" in x][:4]
    print(f"item {key}: {what}: {test} -> {'FAILED (as it must)' if r.returncode == 1 else 'rc ' + str(r.returncode)} "
          f"in {time.time() - t0:.0f}s | " + " / ".join(x.strip()[:160] for x in tail), flush=True)
subprocess.run(["git", "-C", WT, "checkout", "-q", "--", "."], check=True)
