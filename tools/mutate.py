"""Break one mechanism at a time in a scratch worktree, run the test that guards it, expect it to fail.

    git worktree add /tmp/mut HEAD --detach
    sudo .venv/bin/python tools/mutate.py /tmp/mut [ITEM ...]

Issue 14's and issue 27's items: each line names the mechanism broken and the test that must fail. The worktree is
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
 # Issue 27's items.
 ("27.0", "emu/launch.py", "        stopping = True\n        raise Stopped(signum)", "        stopping = True",
  "tests/test_signals.py::test_a_signal_at_any_moment_leaves_nothing_and_the_next_run_works",
  "SIGTERM, SIGHUP and SIGINT are noted and ignored: the run goes on"),
 ("27.2", "emu/collectives/run.py", 'missing = ["BMv2 simple_switch"] if stats.get("backend") == "bmv2" else None',
  "missing = None", "tests/test_bmv2.py::test_a_bmv2_collective_is_never_judged_better_than_unknown",
  "a BMv2 collective's verdict leaves simple_switch out"),
 ("27.3", "emu/fidelity.py", "rank = max(1, math.ceil(q * self.count))", "rank = max(1, math.ceil(q * min(self.count, 8192)))",
  "tests/test_fidelity.py::test_lateness_judges_the_whole_window_not_its_tail", "quantiles read from a window's first 8192 ranks"),
 ("27.4", "emu/fidelity.py", "            self.bins[i] += 1\n", "            self.bins[0] += 1\n",
  "tests/test_engine_ns.py::test_a_worker_that_stops_for_a_while_makes_the_verdict_name_it",
  "every late event is counted as on time"),
 ("27.5", "emu/bench/dilation.py", "return min(d, max(d / LEARN_DOWN_AT_MOST, d * _over(fid) / HEADROOM))", "return d",
  "tests/test_dilation.py::test_an_on_time_run_with_room_to_spare_lowers_what_was_learnt_in_steps",
  "auto D learns only upwards (item 13 too)"),
 ("27.6", "labs/planes/check.py", '    judge(before, after, "with plane 1 down")\n', "",
  "tests/test_labs.py::test_a_wrong_but_running_answer_fails_the_right_step_with_its_hint[planes]",
  "planes step 3 judges only the even spray, where a constant answer passes"),
 ("27.7", "emu/launch.py", "(os.path.realpath(p) != cwd or os.path.realpath(p) == _OWN_ROOT)", "True",
  "tests/test_reliability.py::test_python_m_from_a_users_directory_gives_children_no_import_from_it",
  "children's PYTHONPATH keeps the user's working directory"),
 ("27.8", "emu/scenarios/plane_down.py", "planned = {p: flows[p].wire_bytes for p in planes}",
  "planned = {p: sent[p][\"sent_bytes\"] for p in planes}",
  "tests/test_scenarios.py::test_plane_down_judges_delivery_against_the_planned_bytes", "plane-down judged against what the senders said they sent"),
 ("27.10", "emu/fidelity.py", "ok: bool | None = (not bad and not io) if not missing else (False if bad or io else None)",
  "ok: bool | None = (not bad) if not missing else (False if bad else None)",
  "tests/test_fidelity.py::test_packets_the_emulators_own_io_lost_are_named_in_every_verdict_and_line",
  "the emulator's own drops are named but do not decide ok"),
 ("27.9", "emu/backends/bmv2/switch.py", "*nsexec(self.namespace, self.command(has_notifications_option()))",
  "*self.command(has_notifications_option())",
  "tests/test_bmv2.py::test_thrift_is_reachable_only_inside_the_switch_namespace",
  "simple_switch runs in the machine's namespace, its Thrift port open to its network"),
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
