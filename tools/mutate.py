"""Break one mechanism at a time in a scratch worktree, run the test that guards it, expect it to fail.

    git worktree add /tmp/mut HEAD --detach
    sudo .venv/bin/python tools/mutate.py /tmp/mut [ITEM ...]

Issue 14's, 27's and 41's items: each line names the mechanism broken and the test that must fail. Each test is run
unmutated first: one that fails then proves nothing about its mutation and is reported as such. A mutated run counts
as caught only if a test failed (an assertion), not if it errored (a fixture, an import, a collection): pytest's exit
code is 1 for both, so the summary line tells them apart. The worktree is reset after each; this checkout is never
touched. An item of a .py file runs on the Python core (EMU_CORE=python, the worktree's compiled core moved out of
sight). An item of a .pyx or .pxd, or one marked "native", runs on the compiled core (EMU_CORE=native) built in the worktree, in place: once
unmutated before the list (kept aside and put back for each such item's unmutated run), then once per mutation; a
mutation that does not build proves nothing and says so. Every build checks that the tests import the worktree's
modules, not this checkout's. docs/testing.md has the last results.
"""
import os
import shutil
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
 ("6", "emu/net/flows.py", "self.after_s = fail_plane[1] * -(-f.nbytes // f.size)", "self.after_s = 0.0 * -(-f.nbytes // f.size)",
  "tests/test_scenarios.py::test_plane_down_other_planes_carry_on", "the plane fails before its traffic starts"),
 ("7", "emu/traffic/udp.py", "count = (nbytes + size - 1) // size", "count = (nbytes + size - 1) // size - 1",
  "tests/test_scenarios.py::test_incast_pfc_is_what_makes_it_lossless", "each sender sends one datagram fewer than planned"),
 ("8", "emu/control/routes.py", "usable = min(rate, cap[j])", "usable = rate",
  "tests/test_scenarios.py::test_wcmp_shares_follow_capacity_and_damping_cuts_updates", "weights ignore what a next hop can pass on"),
 ("9", "emu/cli/doctor.py", '"netns": root and _netns(),', '"netns": False,',
  "tests/test_cli.py::test_doctor_reports_every_capability", "doctor reports no namespaces"),
 ("10", "emu/dataplane/pipe.py", "arrive = end + self.delay", "arrive = end + 2 * self.delay",
  "tests/test_engine_ns.py::test_kernel_ping_crosses_the_engine_with_the_configured_delay", "the link applies its delay twice"),
 ("11", "emu/dataplane/engine.py", "        if self.supervisor is not None:  # what follows is asked for, not a death", "        self.procs = []\n        if self.supervisor is not None:",
  "tests/test_api.py::test_ten_lines_ping_every_plane_then_fail_one", "stop() leaves the workers running (and clean() would remove them: the fixture's own snapshot must see it)"),
 ("12", "emu/net/fabric.py", 'do {once} && echo OK $a ||', 'do false && echo OK $a ||',
  "tests/test_cli.py::test_up_fpf_pingall_all_planes_zero_loss", "every first ping fails, the retry answers"),
 # Issue 27's items.
 ("27.0", "emu/launch.py", "        stopping = True\n        raise Stopped(signum)", "        stopping = True",
  "tests/test_signals.py::test_a_signal_at_any_moment_leaves_nothing_and_the_next_run_works",
  "SIGTERM, SIGHUP and SIGINT are noted and ignored: the run goes on"),
 ("27.2", "emu/fidelity.py", 'missing = ["BMv2 simple_switch"] if stats.get("backend") == "bmv2" else []',
  "missing = []", "tests/test_bmv2.py::test_a_bmv2_collective_is_never_judged_better_than_unknown",
  "a BMv2 collective's verdict leaves simple_switch out"),
 ("27.3", "emu/fidelity.py", "rank = max(1, math.ceil(q * self.count))", "rank = max(1, math.ceil(q * min(self.count, 8192)))",
  "tests/test_fidelity.py::test_lateness_judges_the_whole_window_not_its_tail", "quantiles read from a window's first 8192 ranks"),
 ("27.4", "emu/fidelity.py", "            self.bins[i] += 1\n", "            self.bins[0] += 1\n",
  "tests/test_engine_ns.py::test_a_worker_that_stops_for_a_while_makes_the_verdict_name_it",
  "every late event is counted as on time"),
 ("27.5", "emu/net/dilation.py", "return min(d, max(d / LEARN_DOWN_AT_MOST, d * _over(fid) / HEADROOM))", "return d",
  "tests/test_dilation.py::test_an_on_time_run_with_room_to_spare_lowers_what_was_learnt_in_steps",
  "auto D learns only upwards (item 13 too)"),
 ("27.6", "labs/planes/check.py", '    judge(before, after, "with plane 1 down")\n', "",
  "tests/test_labs.py::test_a_wrong_but_running_answer_fails_the_right_step_with_its_hint[planes-0]",
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
 # Issue 41's items.
 ("41.1", "emu/scenarios/srv6_te.py", "        if self.missing(result):\n            return False\n", "",
  "tests/test_scenario_api.py::test_a_measurement_that_got_nothing_fails_the_verdict_and_says_what_was_missing",
  "srv6-te's verdict reads round trips that are not there"),
 ("41.1b", "emu/net/fabric.py", "        return 1.0 + self.timebase.kernel_wall_s(fabric_s)", "        return 2.0",
  "tests/test_scenario_api.py::test_a_ping_waits_for_as_long_as_the_slowest_path_takes_at_this_d",
  "pings wait a fixed 2 s whatever D"),
 ("41.2", "emu/net/dilation.py", "    if d > FLOOR:\n", "    if True:\n",
  "tests/test_dilation.py::test_a_run_at_the_floor_never_sets_a_cost_and_only_lowers_one",
  "a run at the floor D sets the learnt cost (fpf-vs-nsf's 50 s a packet)"),
 ("41.5", "emu/collectives/job.py", 'rng = random.Random(params.get("seed", 0))', "rng = random.Random(0)",
  "tests/test_fabric_clock.py::test_the_seed_reaches_the_wire_and_only_the_wire",
  "a fabric-clock collective ignores its seed"),
 ("41.5b", "emu/roce/transport.py",
  "            usable = self._usable_besides(seg.plane)\n            plane = self._pick_plane(qp, now, avoid=seg.plane if usable else -1)\n            if plane is None or not self._transmit(qp, seg, plane, now):\n                return\n            qp.resend.popleft()",
  "            plane = self.planes[seg.plane]\n            if plane is None or not self._transmit(qp, seg, plane, now):\n                return\n            qp.resend.popleft()",
  "tests/test_trimming.py::test_a_nacked_packet_is_resent_at_once_on_the_other_plane",
  "a NACKed packet is resent on the plane that trimmed it"),
 ("41.5c", "emu/roce/transport.py",
  'if self.cc_name != "none" and (qp.last_trim_cut < 0 or now - qp.last_trim_cut >= qp.cc.cnp_interval):',
  'if self.cc_name != "none":',
  "tests/test_trimming.py::test_a_trim_counts_as_a_cnp_at_most_once_a_cnp_interval",
  "every trim cuts the rate, however close together"),
 ("41.5d", "emu/dataplane/pipeline.py", 'f"{base}/{seed}" if seed else base', "base",
  "tests/test_degrade.py::test_loss_is_random_per_frame_seeded_and_counted",
  "a degraded link ignores its seed (every seed loses the same frames)"),
 ("41.5e", "emu/dataplane/pipe.py", "        self.loss = loss\n", "        self.loss = loss / 10\n",
  "tests/test_degrade.py::test_a_degraded_plane_loses_what_it_is_told_and_restore_brings_it_back",
  "a degraded link loses a tenth of what it is told (a rate ten times off)"),
 ("41.5f", "emu/dataplane/loop.py", "    DRAIN_PS = 10 * PS_PER_S // 1000  # 10 ms\n", "    DRAIN_PS = 0\n",
  "tests/test_fabric_clock.py::test_the_same_fabric_after_any_pause_and_at_any_pace",
  "what a job left runs on the wall after it, not on the schedule"),
 ("41.6a", "emu/web/app.py", "PERIOD_S = 0.25", "PERIOD_S = 0.1",
  "tests/test_web.py::test_the_page_gets_four_snapshots_a_second", "the page updates ten times a second, not four"),
 ("41.6b", "emu/web/static/index.html", "stroke-dasharray: 4 3;", "",
  "tests/test_web.py::test_an_open_page_in_chromium_draws_every_link_an_incast_queue_and_a_failed_plane_greyed",
  "failed links grey but not dashed"),
 ("41.4a", "emu/dataplane/windows.py",
  "        self.horizon = min((nxt if nxt != NEVER else self.horizon) + self.lookahead, NEVER)",
  "        self.horizon = min((nxt if nxt != NEVER else self.horizon) + 2 * self.lookahead, NEVER)",
  "tests/test_split.py::test_bag_over_two_workers_gives_the_figures_of_one",
  "a split fabric's windows run two lookaheads, past frames still crossing"),
 ("41.4b", "emu/dataplane/windows.py",
  "        self.horizon = min((nxt if nxt != NEVER else self.horizon) + self.lookahead, NEVER)",
  "        self.horizon = min((nxt if nxt != NEVER else self.horizon) + 2 * self.lookahead, NEVER)",
  "tests/test_partition.py::test_two_partitions_deliver_the_same_frames_at_the_same_times_as_one_schedule_pfc_across_the_cut",
  "the same break, seen in virtual time (the partitions run the workers' Windows)"),
 ("41.4c", "emu/dataplane/engine.py", "            if machine in LOCAL_MACHINES:", "            if True:",
  "tests/test_cluster.py::test_an_engine_worker_on_another_machine_carries_its_switches_and_the_figures_hold",
  "a worker placed on another machine runs here"),
 ("41.4d", "emu/dataplane/channel.py", '"bound_s": abs(off) + rtt / 2,', '"bound_s": rtt / 2,',
  "tests/test_cluster.py::test_the_wall_clock_over_two_machines_counts_their_clocks_agreement",
  "the machines' clock bound leaves their offset out (the round trip only)"),
 ("41.4e", "emu/collectives/elastic.py", "resume = min(accepts[p] for p in new)", "resume = max(accepts[p] for p in new)",
  "tests/test_scenarios.py::test_replica_exclusion_survivors_detect_agree_and_finish_every_step_exact",
  "survivors resume at the furthest step any was in, not the least"),
 ("41.4f", "emu/collectives/elastic.py", "                        qp.cancel()\n", "                        pass\n",
  "tests/test_scenarios.py::test_replica_exclusion_survivors_detect_agree_and_finish_every_step_exact",
  "a view change keeps the aborted step's writes queued"),
 ("41.4g", "emu/collectives/elastic.py", "                if set(accepts) >= set(new):", "                if accepts:",
  "tests/test_scenarios.py::test_replica_exclusion_survivors_detect_agree_and_finish_every_step_exact",
  "the coordinator commits the new view before every survivor has accepted it"),
 ("41.5g", "emu/cli/main.py", "    return _clean_machines(_machines(args.machines), args.quiet)", "    return 0",
  "tests/test_cluster.py::test_a_controller_killed_mid_run_leaves_nothing_once_emu_clean_machines_has_run",
  "`emu clean --machines` cleans only this machine"),
 ("38.1", "emu/net/flows.py", '"duration_s": fabric_s(r.pop("wall_s"))}', '"duration_s": r.pop("wall_s")}',
  "tests/test_bmv2.py::test_incast_is_lossless_with_pfc_and_loses_without_on_both_backends[bmv2]",
  "BMv2's flows (processes in the hosts, the only KernelFlows) hand up wall seconds as fabric ones (D not applied)"),
 # Issue 50's item 7 (tie keys, a split wall clock) and issue 51's item 10 (what was built since the last list).
 ("50.7a", "emu/dataplane/worker.py", "send(peer, pid, t + delay, frame, loop.key)",
  "send(peer, pid, t + delay, frame, loop.reserve())",
  "tests/test_collectives.py::test_a_split_fabric_gives_one_workers_figure_to_the_bit",
  "a frame crossing to another worker takes a key of the sender's making, not the one its link took"),
 ("50.7b", "emu/collectives/job.py",
  '                with self.as_origin("host", self.params["ranks"][r]["name"], self.op, size):',
  "                if True:",
  "tests/test_collectives.py::test_a_split_fabric_gives_one_workers_figure_to_the_bit",
  "each part starts its ranks as the job's begin, counting its own children"),
 ("50.7c", "emu/dataplane/schedule.py", "    return x ^ x >> 31\n\n\ndef origin", "    return h\n\n\ndef origin",
  "tests/test_schedule.py::test_ties_between_symmetric_senders_are_fair_and_do_not_depend_on_when_they_start",
  "an event's identity is its scheduler's: a chain's ties always fall the same way"),
 ("50.7d", "emu/dataplane/loop.py", "            sync.end_window(min(nxt, sched.stamp()), sched.busy > 0 or nxt < sched.drain_until)",
  "            sync.end_window(nxt, sched.busy > 0 or nxt < sched.drain_until)",
  "tests/test_split.py::test_kernel_frames_cross_a_split_wall_clock_fabric_while_a_job_runs",
  "a paced barrier promises its next event, not the wall's instant a kernel's frame may come in at"),
 ("51.10a", "emu/collectives/algorithms.py", "        return (_longest_run(edges, steps) + max(edges)",
  "        return (max(edges) * steps + max(edges)",
  "tests/test_algorithms.py::test_the_cost_model_prices_a_long_link_per_crossing",
  "auto's model pays the slowest edge at every step of the ring"),
 ("51.10c", "emu/collectives/algorithms.py",
  '            sent[p] = b.send(step, p, "data", lo * chunk, d * chunk, "data", lo * chunk)',
  '            sent[p] = b.send(step, p, "data", lo * chunk, d * chunk, "data", 0)',
  "tests/test_algorithms.py::test_halving_doubling_gives_every_rank_its_result",
  "recursive doubling lands a partner's chunks at the start of the data, not in their place"),
 ("51.10d", "emu/scenarios/distance_cliff.py",
  '"bytes_ring_over_hier_narrow": narrow["ring"]["long_haul_bytes"] / max(1, narrow["hier"]["long_haul_bytes"]),',
  '"bytes_ring_over_hier_narrow": narrow["hier"]["long_haul_bytes"] / max(1, narrow["ring"]["long_haul_bytes"]),',
  "tests/test_collectives.py::test_the_distance_cliff_hierarchy_crosses_bag_less_and_keeps_more_of_its_busbw",
  "distance-cliff reports the bytes' ratio upside down"),
 ("51.10e", "emu/collectives/run.py", "    if shared:\n        raise ValueError(", "    if False:\n        raise ValueError(",
  "tests/test_collectives.py::test_a_job_on_some_hosts_and_planes_and_tenants_that_cannot_run_say_why",
  "tenants may share a host (two ranks on one NIC, figures of neither)"),
 ("51.10b", "emu/collectives/job.py", "        self.loop.at(t + to_ps(float(self.nodes[r][nid][3])), self._computed, (r, nid, t))",
  "        self.loop.at(t, self._computed, (r, nid, t))",
  "tests/test_replay.py::test_a_training_step_replays_with_the_step_time_of_its_critical_path",
  "a replayed trace's compute takes no time"),
 # Issue 51's item 10, the remainder: the compiled core's twins of mechanisms (built in the worktree, EMU_CORE=native).
 ("51.10n1", "emu/dataplane/_core.pyx", "        cdef int64_t arrive = end + self.delay_ps\n",
  "        cdef int64_t arrive = end + 2 * self.delay_ps\n",
  "tests/test_switch.py::test_link_rate_and_delay_are_applied_on_both_hops[native]",
  "the compiled link applies its delay twice"),
 ("51.10n2", "emu/dataplane/_core.pyx", "* PS_PER_S + <uint64_t>(rate_bps // 2)) // <uint64_t>rate_bps)",
  "* PS_PER_S) // <uint64_t>rate_bps)",
  "tests/test_simtime.py::test_a_frames_time_on_a_wire_is_exact_and_rounds_halves_up[native]",
  "a frame's serialisation time truncated, not rounded to the nearest picosecond"),
 ("51.10n3", "emu/dataplane/_core.pyx", "        return free_ >> self.shift if free_ > 0 else 0",
  "        return free_ >> (self.shift - 1) if free_ > 0 else 0",
  "tests/test_buffer.py::test_the_compiled_buffer_pauses_and_resumes_where_the_reference_does[incast]",
  "the shared buffer's dynamic threshold (where a lossless queue spills into headroom and pauses) doubled"),
 ("51.10n3b", "emu/dataplane/_core.pyx", "        return free_ >> self.shift if free_ > 0 else 0",
  "        return free_ >> (self.shift - 1) if free_ > 0 else 0",
  "tests/test_cores.py::test_a_fabric_clock_scenario_gives_the_same_figures_on_both_cores_and_as_recorded[headroom]",
  "the same break, against both cores' recorded headroom scenario (the recorded incast never pauses: 0 PFC frames)"),
 ("51.10n3c", "emu/dataplane/_core.pyx", "return (shared >= thr and thr > 0) or (shared > 0 and thr == 0)",
  "return (shared >= 2 * thr and thr > 0) or (shared > 0 and thr == 0)",
  "tests/test_buffer.py::test_the_compiled_buffer_pauses_and_resumes_where_the_reference_does[staggered]",
  "XOFF's own test of the threshold doubled (the spill into headroom left as it is)"),
 ("51.10n3d", "emu/dataplane/_core.pyx", "        return shared == 0 or shared + self.resume_offset <= self.threshold()",
  "        return shared == 0 or shared <= self.threshold()",
  "tests/test_cores.py::test_a_fabric_clock_scenario_gives_the_same_figures_on_both_cores_and_as_recorded[headroom]",
  "XON without its hysteresis (resume as soon as the queue is back under the threshold)"),
 ("51.10n4", "emu/dataplane/_core.pyx", "(q >= kmax or mt_random(&self.c_rng) < self.pmax[tc] * <double>(q - kmin) / <double>(kmax - kmin))",
  "(q >= kmax or True)",
  "tests/test_switch.py::test_ecn_marks_ect_packets_above_kmax_only[native]",
  "ECN marks every ECT frame above Kmin, whatever its probability"),
 ("51.10n5", "emu/dataplane/_core.pyx", "        if proto == 17 or proto == 6:\n            h = crc32(f + l4, 4, h)",
  "        if False:\n            h = crc32(f + l4, 4, h)",
  "tests/test_cores.py::test_a_fabric_clock_scenario_gives_the_same_figures_on_both_cores_and_as_recorded[wcmp]",
  "the ECMP hash leaves the ports out (one path per pair of hosts)"),
 ("51.10n6", "emu/dataplane/_core.pyx", "    return c_mix64(h + (<uint64_t>c + 1) * GOLDEN)", "    return h",
  "tests/test_schedule.py::test_ties_between_symmetric_senders_are_fair_and_do_not_depend_on_when_they_start[native]",
  "the compiled schedule's identity is its scheduler's: a chain's ties always fall the same way"),
 ("51.10n7", "emu/dataplane/_core.pyx", "    return a.c < b.c", "    return a.c > b.c",
  "tests/test_schedule.py::test_events_run_in_time_order_and_ties_of_one_scheduler_in_the_order_scheduled[native-unpaced]",
  "the heap runs one scheduler's ties last scheduled first"),
 ("51.10n8", "emu/roce/_device.pyx", "self.rate * (1 - self.alpha / 2)", "self.rate * (1 - self.alpha / 4)",
  "tests/test_trimming.py::test_a_trim_counts_as_a_cnp_at_most_once_a_cnp_interval[native]",
  "the compiled DCQCN cuts by alpha / 4, not alpha / 2"),
 ("51.10n9", "emu/roce/_device.pyx",
  "plane = self._pick_plane(now, seg.plane if self._usable_besides(seg.plane) else -1)",
  "plane = &self.planes_c[seg.plane]",
  "tests/test_trimming.py::test_a_nacked_packet_is_resent_at_once_on_the_other_plane[native]",
  "the compiled device resends a NACKed packet on the plane that trimmed it"),
 ("51.10n10", "emu/roce/_device.pyx",
  'if self.cc_name != "none" and (qp.last_trim_cut < 0 or now - qp.last_trim_cut >= qp.cc.cnp_interval):',
  'if self.cc_name != "none":',
  "tests/test_trimming.py::test_a_trim_counts_as_a_cnp_at_most_once_a_cnp_interval[native]",
  "the compiled device cuts the rate at every trim, however close together"),
 ("51.10n11", "emu/roce/_device.pyx",
  "                    memcpy(mr.buf + (va - mr.va), data + head, length)\n                qp.rx_bytes += length\n",
  "                    memcpy(mr.buf + (va - mr.va), data + head, length)\n                    qp.rx_bytes += length\n",
  "tests/test_cores.py::test_headers_only_gives_the_recorded_figures_and_checks_every_bytes_delivery[bag-allreduce]",
  "headers only: the compiled device counts what it writes, so nothing is counted as delivered"),
 ("51.10n12", "emu/roce/_device.pyx", " and self.dev.payload:", ":",  # the end of RingOp's reduce test, whichever its form
  "tests/test_cores.py::test_headers_only_leaves_the_ranks_memory_untouched",
  "headers only: the compiled ring still reduces into the ranks' memory"),
 # Issue 51's item 10, recordings: the live view's Recorder and the snapshots it keeps (emu.web).
 ("51.10r1", "emu/web/app.py", "        if running:\n            self.take()\n", "",
  "tests/test_web.py::test_a_recording_holds_every_figure_each_snapshot_had_on_each_plane",
  "a recording stops without its last snapshot (the fabric's state at the end)"),
 ("51.10r2", "emu/web/scene.py", "                    self.last[(lk.id, direction)] = (fabric_s, nbytes)",
  "                    self.last.setdefault((lk.id, direction), (fabric_s, nbytes))",
  "tests/test_web.py::test_a_recording_holds_every_figure_each_snapshot_had_on_each_plane",
  "a snapshot's rates are since the first snapshot, not over its own interval"),
 ("51.10r3", "emu/web/scene.py", "        self.last_paused[key] = paused\n", "        self.last_paused.setdefault(key, paused)\n",
  "tests/test_web.py::test_a_recording_holds_every_figure_each_snapshot_had_on_each_plane",
  "a pause is shown in every snapshot after it, not in the interval it happened in"),
 ("51.10r4", "emu/web/scene.py", '"pfc_tx": p.get("pfc_tx", 0)', '"pfc_tx": 0',
  "tests/test_web.py::test_a_recording_holds_every_figure_each_snapshot_had_on_each_plane",
  "a counter dropped: the PFC frames a port sent are recorded as none"),
 ("51.10r5", "emu/web/scene.py", '                "planes": self.planes}', '                "planes": {k: 0 for k in self.planes}}',
  "tests/test_web.py::test_a_recording_holds_every_figure_each_snapshot_had_on_each_plane",
  "the recorded topology puts every switch on plane 0 (a replay draws plane 1's rates and queues as plane 0's)"),
 # Issue 51's item 10, the timebase: fabric time at the edges (ps <-> s) and D, on what the native backend runs.
 ("51.10t1", "emu/net/fabric.py", "rtts = [float(x) / 1e3 / self.timebase.dilation for x in", "rtts = [float(x) / 1e3 for x in",
  "tests/test_scenario_api.py::test_a_ping_waits_for_as_long_as_the_slowest_path_takes_at_this_d",
  "a kernel ping's round trip handed up in wall seconds (D not applied)"),
 ("51.10t2", "emu/dataplane/schedule.py", "        return self.anchor_f + to_ps((wall - self.anchor_w) / self.idle_dilation)",
  "        return self.anchor_f + to_ps(wall - self.anchor_w)",
  "tests/test_schedule.py::test_outside_input_is_stamped_at_the_fabric_instant_the_wall_maps_to[python-paced]",
  "the wall mapped to fabric time at D = 1: a kernel's frame stamped D times too far into the fabric's time"),
 ("51.10t3", "emu/dataplane/_core.pyx", "        return self.anchor_f + c_to_ps((wall - self.anchor_w) / self.idle_dilation)",
  "        return self.anchor_f + c_to_ps(wall - self.anchor_w)",
  "tests/test_schedule.py::test_a_paced_event_never_runs_before_the_wall_reaches_it[native-paced]",
  "the compiled pacer maps the wall at D = 1: paced events run D times too early"),
 ("51.10t4", "emu/dataplane/_core.pyx", "    return <double>ps / 1e12", "    return <double>ps * 1e-12",
  "tests/test_simtime.py::test_both_cores_give_the_same_answers_bit_for_bit",
  "the compiled core's seconds at the edges a product by 1e-12, not the quotient (the last bit differs)"),
 ("51.10t5", "emu/simtime.py", "    return round(x)\n", "    return int(x)\n",
  "tests/test_simtime.py::test_halves_round_to_even_and_the_rest_to_the_nearest[python]",
  "seconds to picoseconds truncated, not rounded to the nearest"),
 # Issue 51's item 10 (the brief's list): MetaRoCE's plane-spray pick, on each core.
 ("51.10s1", "emu/roce/transport.py",
  "if p.healthy and p.weight and p.index != avoid and (best is None or p.next_free < best.next_free):",
  "if p.healthy and p.weight and p.index != avoid and best is None:",
  "tests/test_roce.py::test_64mib_write_correct_and_sprayed_evenly",
  "a queue pair sends on the first usable plane, not the one whose wire frees first"),
 ("51.10s2", "emu/roce/_device.pyx",
  "if self.ready >> i & 1 and i != avoid and (best < 0 or self.free_at[i] < self.free_at[best]):",
  "if self.ready >> i & 1 and i != avoid and best < 0:",
  "tests/test_roce.py::test_64mib_write_correct_and_sprayed_evenly",
  "the compiled device sends on the first usable plane, not the one whose wire frees first"),
 ("51.10s3", "emu/roce/transport.py", "if p.healthy and p.weight and p.index != avoid", "if p.healthy and p.index != avoid",
  "tests/test_degrade.py::test_metaroce_recovers_a_lossy_plane_without_stalls_and_weighs_slow_and_long_planes",
  "the pick ignores a plane's weight: a plane excluded for its length (weight 0) still carries data"),
 ("51.10s4", "emu/roce/_device.pyx", "        if p.healthy and p.weight:\n", "        if p.healthy:\n",
  "tests/test_degrade.py::test_metaroce_recovers_a_lossy_plane_without_stalls_and_weighs_slow_and_long_planes",
  "the compiled device's usable planes (its ready bits) ignore a plane's weight"),
 ("51.10s5", "emu/roce/transport.py", "(best is None or p.next_free < best.next_free)", "(best is None or p.next_free <= best.next_free)",
  "tests/test_cores.py::test_the_benchmarks_collectives_give_the_same_figures_on_both_cores_and_as_recorded[fpf-rhd-allreduce]",
  "of planes whose wires free at once, the last is picked, not the first (the Python core against the compiled "
  "and the recorded figures)", "native"),
 ("51.10s6", "emu/roce/_device.pyx", "(best < 0 or self.free_at[i] < self.free_at[best])",
  "(best < 0 or self.free_at[i] <= self.free_at[best])",
  "tests/test_cores.py::test_the_benchmarks_collectives_give_the_same_figures_on_both_cores_and_as_recorded[fpf-rhd-allreduce]",
  "the compiled pick takes the last of planes free at once, not the first"),
 # Issue 51's other items (the audit in docs/testing.md): the change that closed each, broken.
 ("51.1a", "setup.py", "    if required():\n        raise SystemExit(", "    if False:\n        raise SystemExit(",
  "tests/test_build.py::test_a_compiled_core_that_does_not_build_stops_the_set_up_with_the_error",
  "a compiled core that does not build is one line, set-up goes on"),
 ("51.1b", "emu/dataplane/core.py", "    return bool(built) and any(", "    return False and any(",
  "tests/test_build.py::test_a_build_older_than_its_source_is_refused", "a build older than its .pyx is used"),
 ("51.2", "tests/test_cores.py", '"planes", "srv6-te", "trimming", "wcmp")', '"planes", "srv6-te", "trimming")',
  "tests/test_labs.py::test_every_fabric_clock_lab_is_compared_on_both_cores",
  "a fabric-clock lab left out of the two cores' comparison, unsaid"),
 ("51.3", "emu/dataplane/spec.py", 'core=d.get("core", "python"),', 'core="python",',
  "tests/test_cores.py::test_the_benchmarks_collectives_give_the_same_figures_on_both_cores_and_as_recorded[fpf-rhd-allreduce]",
  "the compiled core asked for, every worker runs the Python one (its spec read back without the core): the "
  "same figures, only the worker's report differs", "native"),
 # Run with EMU_RECORD_FIGURES=1 (51.4) and EMU_LABS=a folder of one lab (51.12) in mutate.py's environment:
 # each test passes so (it records and skips; the suite sets EMU_LABS aside), and must fail mutated.
 ("51.4", "emu/dataplane/_core.pyx", "        cdef int64_t arrive = end + self.delay_ps\n",
  "        cdef int64_t arrive = end + 2 * self.delay_ps\n",
  "tests/test_cores.py::test_the_benchmarks_collectives_give_the_same_figures_on_both_cores_and_as_recorded[fpf-rhd-allreduce]",
  "under EMU_RECORD_FIGURES=1, cores that disagree (the compiled link's delay twice): compared before recording"),
 ("51.12", "tests/conftest.py", 'os.environ.pop("EMU_LABS", None)', "pass",
  "tests/test_labs.py::test_every_step_of_every_lab_has_a_wrong_answer_case",
  "the suite inherits the shell's EMU_LABS (a user's labs folder)"),
 ("51.6", "emu/web/devtools.py", '            f.write(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))',
  "            pass",
  "tests/test_web.py::test_an_open_page_in_chromium_draws_every_link_an_incast_queue_and_a_failed_plane_greyed",
  "a screenshot writes nothing (the unmutated run's images are left in the worktree's results/)"),
 ("51.7", "emu/bench/forwarding.py", '"engine_over_bmv2": round(e / m, 2)', '"engine_over_bmv2": round(m / e, 2)',
  "tests/test_readme_claims.py::test_bench_engine_measures_the_engine_against_a_bridge_in_one_run",
  "emu bench engine's BMv2 ratio upside down"),
 ("51.8a", "labs/pfc-headroom/check.py", "        if abs(said - truth) > 1:", "        if abs(said - truth) > 0.5 * truth:",
  "tests/test_labs.py::test_a_wrong_but_running_answer_fails_the_right_step_with_its_hint[pfc-headroom-0]",
  "pfc-headroom step 1 accepts 1.5 x the right headroom again"),
 ("51.8b", "labs/ecn-dcqcn/check.py", "    if kmax > PORT_BUFFER:", "    if False:",
  "tests/test_labs.py::test_a_wrong_but_running_answer_fails_the_right_step_with_its_hint[ecn-dcqcn-0]",
  "ecn-dcqcn step 2 accepts a Kmax beyond the port's buffer (any ordered triple)"),
 ("51.9", "emu/roce/transport.py", "rto = max(self.rto, 4 * (qp.srtt or self.rtt_hint) + self.ack_delay)",
  "rto = max(self.rto, 3 * (qp.srtt or self.rtt_hint) + self.ack_delay)",
  "tests/test_scenarios.py::test_replica_exclusion_survivors_detect_agree_and_finish_every_step_exact",
  "the retransmission timeout 3 idle round trips, not 4 (inside the old 25-203 ms band)"),
 ("51.11a", "emu/labs.py", '    target = Path(dest or f"lab-{name}")', "    target = Path(dest or name)",
  "tests/test_readme_claims.py::test_lab_start_copies_the_starter_to_its_default_folder",
  "emu lab start copies into ./NAME, not the README's ./lab-NAME"),
 ("51.11b", "emu/net/fabric.py", "        if self.settings.pace:\n            self.engine.set_pace",
  "        if False:\n            self.engine.set_pace",
  "tests/test_readme_claims.py::test_pace_slows_a_fabric_clock_run_and_changes_no_figure", "--pace ignored"),
 ("51.d1", "emu/dataplane/loop.py", "    BATCH = 2048", "    BATCH = 4096",
  "tests/test_readme_lists.py::test_the_architecture_names_the_loops_batch_and_the_reference_classes_as_the_code_has_them",
  "the loop's batch changed, docs/architecture.md not"),
 ("51.d2", "README.md", "| `--pace WALL_S` |", "| pace WALL_S |",
  "tests/test_readme_lists.py::test_the_run_options_table_names_every_run_option_and_no_other",
  "the README's options table without --pace"),
 ("51.11c", "README.md", "took 1.3 s for the whole command", "took 1.2 s for the whole command",
  "tests/test_readme_lists.py::test_the_readme_opening_figures_are_what_docs_performance_records",
  "the README's opening figure not docs/performance.md's"),
 ("51.d4", "docs/architecture.md", "  pipe.Transmitter, buffer.SharedBuffer,", "  link.Transmitter, buffer.SharedBuffer,",
  "tests/test_readme_lists.py::test_the_architecture_names_the_loops_batch_and_the_reference_classes_as_the_code_has_them",
  "docs/architecture.md names the reference's link where it was (link.Transmitter)"),
 ("51.d5", "README.md", "headroom, incast, plane-down,", "headroom, plane-down,",
  "tests/test_readme_lists.py::test_every_scenario_is_shown_and_each_clock_default_list_is_the_codes",
  "the README's list of fabric-clock scenarios without incast"),
 ("51.d3", "README.md", ", web.md,", ",", "tests/test_readme_lists.py::test_the_layout_names_every_doc",
  "the README's layout without docs/web.md"),
]


COMPILED = [os.path.join(WT, m) for m in ("emu/dataplane/_core", "emu/roce/_device")]
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
PRODUCTS = [m + ext for m in COMPILED for ext in (".c", SUFFIX)]  # in this order: each .so newer than its .c
KEPT = os.path.join(WT, ".mutate-core")  # the unmutated build, kept aside (the worktree is scratch)


def env(core: str) -> dict[str, str]:
    """The worktree first on the path: its emu, and its compiled modules, not this checkout's."""
    return dict(os.environ, PYTHONPATH=WT + ":" + SITE, EMU_CORE=core)


def build() -> tuple[bool, list[str]]:
    """The compiled core built in the worktree (setup.py's build_ext, in place: only what changed), and
    found there by the tests' import path; False and the lines that say why if it did not build."""
    e = env("native")
    del e["EMU_CORE"]  # setup.py builds nothing under EMU_CORE=python
    r = subprocess.run([PY, "setup.py", "-q", "build_ext", "--inplace"], cwd=WT, env=e, capture_output=True, text=True)
    if r.returncode:
        return False, [x for x in (r.stdout + r.stderr).splitlines() if "error" in x.lower()][-3:]
    r = subprocess.run([PY, "-c", "import importlib.util as u; print(u.find_spec('emu.dataplane._core').origin, "
                        "u.find_spec('emu.roce._device').origin)"], cwd="/", env=env("native"), capture_output=True,
                       text=True)  # where the tests will import them from (found, not run: a mutation may crash)
    if r.stdout.split() != [m + SUFFIX for m in COMPILED]:
        sys.exit(f"the tests would not import the worktree's compiled core: {r.stdout.strip()} {r.stderr[-300:]}")
    return True, []


def use_core(native: bool) -> None:
    """The unmutated build back in place (copied now, so newer than the sources the reset rewrote), or out
    of the worktree so that a Python item runs as it always did."""
    for f in PRODUCTS:
        if native:
            shutil.copyfile(os.path.join(KEPT, os.path.basename(f)), f)
        elif os.path.exists(f):
            os.remove(f)


def pytest_run(test: str, core: str) -> tuple[str, list[str]]:
    """passed, failed (an assertion), or error (anything else), and the lines that say why."""
    r = subprocess.run([PY, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], cwd=WT, capture_output=True,
                       text=True, env=env(core))
    lines = r.stdout.splitlines()
    summary = next((x for x in reversed(lines) if " in " in x and ("passed" in x or "failed" in x or "error" in x)), "")
    why = [x for x in lines if x.startswith("E ")][:3] + [summary]
    if r.returncode == 0:
        return "passed", why
    if r.returncode == 1 and " failed" in summary and " error" not in summary:
        return "failed", why
    return "error", why

def on_native(item: tuple[str, ...]) -> bool:
    """Whether an item runs on the compiled core: its file is the core's, or it says so (a seventh field,
    "native": a .py item whose test needs the compiled core there, the worktree's build as it is)."""
    return item[1].endswith((".pyx", ".pxd")) or item[6:] == ("native",)


only = sys.argv[2:]
items = [m for m in M if not only or m[0] in only]
subprocess.run(["git", "-C", WT, "checkout", "-q", "--", "."], check=True)
if any(on_native(m) for m in items):
    built, why = build()
    if not built:
        sys.exit("the unmutated compiled core did not build in the worktree: " + " / ".join(why))
    os.makedirs(KEPT, exist_ok=True)
    for f in PRODUCTS:
        shutil.copyfile(f, os.path.join(KEPT, os.path.basename(f)))
for item in items:
    key, path, old, new, test, what = item[:6]
    native = on_native(item)
    core = "native" if native else "python"
    subprocess.run(["git", "-C", WT, "checkout", "-q", "--", "."], check=True)
    use_core(native)
    before, why = pytest_run(test, core)
    if before != "passed":
        print(f"item {key}: {test} does not pass unmutated ({before}): proves nothing | "
              + " / ".join(x.strip()[:160] for x in why), flush=True)
        continue
    f = os.path.join(WT, path)
    s = open(f).read()
    assert s.count(old) == 1, (key, path, s.count(old))
    open(f, "w").write(s.replace(old, new))
    t0 = time.time()
    built, why = build() if path.endswith((".pyx", ".pxd")) else (True, [])
    after, why = pytest_run(test, core) if built else ("build", why)
    verdict = {"failed": "FAILED (as it must)", "passed": "passed: NOT CAUGHT", "build": "errored: NOT CAUGHT (build)",
               "error": "errored: NOT CAUGHT (not an assertion)"}
    print(f"item {key}: {what}: {test} -> {verdict[after]} in {time.time() - t0:.0f}s | "
          + " / ".join(x.strip()[:160] for x in why), flush=True)
subprocess.run(["git", "-C", WT, "checkout", "-q", "--", "."], check=True)
use_core(False)
shutil.rmtree(KEPT, ignore_errors=True)
