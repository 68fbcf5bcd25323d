"""Mininet's CLI with the fabric's own commands: stats, fail, restore, pingplanes."""

from __future__ import annotations

from mininet.cli import CLI

from emu.cli.render import print_stats


class FabricCLI(CLI):
    prompt = "emu> "

    def do_stats(self, line: str) -> None:
        """stats: counters of every active port, in fabric units."""
        print_stats(self.mn.engine.stats())

    def do_fail(self, line: str) -> None:
        """fail NODE1 NODE2 | fail SWITCH | fail plane N: take a link, a switch or a plane down."""
        self._link(line, up=False)

    def do_restore(self, line: str) -> None:
        """restore NODE1 NODE2 | restore SWITCH | restore plane N: bring it back (from fail or degrade)."""
        self._link(line, up=True)

    def do_degrade(self, line: str) -> None:
        """degrade NODE1 NODE2 | SWITCH | plane N  [loss=0.01] [rate=25G] [delay=5us]: lossy, slower or
        longer, not down (fabric units; `restore` brings it back)."""
        args = [a for a in line.split() if "=" not in a]
        opts = dict(a.split("=", 1) for a in line.split() if "=" in a)
        if len(args) not in (1, 2) or not opts or set(opts) - {"loss", "rate", "delay"}:
            print("usage: degrade NODE1 NODE2 | SWITCH | plane N  [loss=P] [rate=RATE] [delay=TIME]")
            return
        try:
            kw = {"loss": float(opts.get("loss", 0.0)), "rate": opts.get("rate"), "delay": opts.get("delay")}
            if args[0] == "plane" and len(args) == 2 and args[1].isdigit():
                self.mn.degrade(plane=int(args[1]), **kw)
            elif len(args) == 2:
                self.mn.degrade(link=(args[0], args[1]), **kw)
            else:
                self.mn.degrade(switch=args[0], **kw)
        except (KeyError, ValueError, RuntimeError) as exc:
            print(f"*** {exc}")

    def do_policy(self, line: str) -> None:
        """policy SWITCH PREFIX SID1,SID2,... | policy SWITCH PREFIX clear: an SRv6 H.Encaps policy, live."""
        args = line.split()
        if len(args) != 3:
            print("usage: policy SWITCH PREFIX SID1,SID2,... | policy SWITCH PREFIX clear")
            return
        switch, prefix, segs = args
        try:
            if segs == "clear":
                self.mn.control.clear_policy(switch, prefix)
            else:
                source = getattr(self.mn.nameToNode.get(switch), "loopback6", "")
                if not source:
                    print(f"*** {switch} has no IPv6 loopback to use as the encapsulation source")
                    return
                self.mn.control.set_policy(switch, prefix, segs.split(","), source)
        except (KeyError, ValueError, RuntimeError) as exc:
            print(f"*** {exc}")

    def do_measure(self, line: str) -> None:
        """measure SWITCH1 SWITCH2: time probes across the link, print its length, size its headroom."""
        args = line.split()
        if len(args) != 2:
            print("usage: measure SWITCH1 SWITCH2")
            return
        try:
            for m in self.mn.control.size_headroom(*args):
                print(f"{m.switch} {m.port}: RTT {m.rtt_s * 1e6:.3f} us -> {m.length_m:.0f} m, headroom {m.headroom} B")
        except (KeyError, ValueError, RuntimeError) as exc:
            print(f"*** {exc}")

    def do_rperf(self, line: str) -> None:
        """rperf SRC DST [BYTES]: MetaRoCE write bandwidth and latency, data checked."""
        from emu.roce.run import PerfRun, mininet_popen
        from emu.units import parse_size

        args = line.split()
        if len(args) not in (2, 3):
            print("usage: rperf SRC DST [BYTES]")
            return
        try:
            src, dst = self.mn.nameToNode[args[0]], self.mn.nameToNode[args[1]]
            client, server = PerfRun(mininet_popen(src), mininet_popen(dst),
                                     nbytes=parse_size(args[2] if len(args) > 2 else "4MiB"),
                                     dilation=self.mn.engine.spec.dilation).wait()
        except (KeyError, ValueError, RuntimeError) as exc:
            print(f"*** {exc}")
            return
        print(f"*** {client['bytes']} B at {client['bw_fabric_bps'] / 1e9:.1f} Gb/s (fabric), "
              f"{client['retransmits']} retransmits, data {'ok' if server['data_ok'] else 'WRONG'}")

    def do_run(self, line: str) -> None:
        """run [-np N] [--hosts H1,H2] [--mpi [--mpi-planes P,..]] [--no-dilate-time] [--timeout S] -- PROG ARGS: a
        distributed job, one rank per host (RANK, WORLD_SIZE, MASTER_ADDR, EMU_HOSTS, ...), each line tagged [rank I];
        on the wall clock the ranks' clocks run at fabric time (libfaketime) unless --no-dilate-time."""
        import argparse
        import shlex

        from emu.cli.runjob import job_options, mpi_planes, print_line
        from emu.net.ranks import JobTimeout

        words = shlex.split(line)
        if "--" not in words or words.index("--") == len(words) - 1:
            print("usage: run [-np N] [--hosts H1,H2] [--mpi [--mpi-planes P,..]] [--no-dilate-time] [--timeout S] "
                  "-- PROG [ARGS]")
            return
        cut = words.index("--")
        p = argparse.ArgumentParser(prog="run", add_help=False, exit_on_error=False)
        job_options(p)
        try:
            args = p.parse_args(words[:cut])
            hosts = args.hosts.split(",") if args.hosts else None
            results = self.mn.run(words[cut + 1:], np=args.np, hosts=hosts, mpi=args.mpi, planes=mpi_planes(args),
                                  timeout=args.timeout, dilate_time=not args.no_dilate_time, sink=print_line)
        except JobTimeout as exc:  # this command's option, --timeout, not the API's timeout=
            print(f"*** {exc.said('--timeout')}")
            return
        except (argparse.ArgumentError, ValueError, RuntimeError, OSError) as exc:  # RankFailed: one line too
            print(f"*** {exc}")
            return
        print(f"*** {len(results)} ranks, every one exited 0")

    def do_pingplanes(self, line: str) -> None:
        """pingplanes [6]: ping every address of every other host, on every plane."""
        r = self.mn.pingall_planes(6 if line.strip() == "6" else 4)
        print(f"*** pingplanes: {r.received}/{r.sent} received, {r.loss:.1f}% loss")
        for src, dst in r.failed[:20]:
            print(f"    {src} -> {dst} failed")

    def _link(self, line: str, *, up: bool) -> None:
        args = line.split()
        if len(args) not in (1, 2):
            print("usage: fail|restore NODE1 NODE2 | SWITCH | plane N")
            return
        try:
            verb = self.mn.restore if up else self.mn.fail
            if args[0] == "plane" and len(args) == 2 and args[1].isdigit():
                verb(plane=int(args[1]))
            elif len(args) == 2:
                verb(link=(args[0], args[1]))
            else:
                verb(switch=args[0])
        except (KeyError, ValueError, RuntimeError) as exc:
            print(f"*** {exc}")
