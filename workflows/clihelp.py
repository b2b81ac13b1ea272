"""What `krig SUBCOMMAND --help` says after the options: examples, exit codes, the docs page.

Each subcommand's epilog is kept here, one entry per subcommand path, and set on the parser
by apply(); tests/workflows/test_cli.py checks that every subcommand has one with all three parts."""
import argparse

from krig.verdict import VERDICTS

VERDICT_CODES = "\n".join(f"  {c:3d} {v:12s} {m}" for v, (c, m) in VERDICTS.items() if v != "INTERRUPTED")
RUN_CODES = (f"exit codes (the verdict's):\n{VERDICT_CODES}\n"
             "    2 (bad input)    one line names the flag or field; nothing ran\n"
             "  130 INTERRUPTED    stopped by Ctrl-C or SIGTERM; what was collected is kept")

KERNEL_HELP = ("the kernel (default distro): NAME of kernels/NAME.toml; PATH of a built kernel tree "
               "(arch/x86/boot/bzImage, .config, System.map; its modules installed into krig's cache); PATH "
               "of an image file, with ,config=FILE (else config-<release>, .config or config next to it) "
               "and ,modules=DIR; TREE@REF, a git tree at a commit-ish that krig builds with the config of "
               ",like=KERNEL (default linux-6.1) and caches; any buildable one with ,series=MBOX (a patch "
               "series on top) and ,drivers=RIG|PATH (a lab server's network card and disk drivers built in, "
               "read from its installed system; on a kexec rig a kernel lacking them is refused before its "
               "kexec). A tree's or image's config is checked against the reproducer's config "
               "fragment before booting. Examples: ~/linux@v6.1,like=tiny-6.1 tiny-6.1,drivers=lab1")

PROJECT_HELP = ("also project the run to a machine of RAM bytes (and CPUS; default this run's), e.g. 512G or "
                "3T:384; repeatable. Where the reproducer has a model (neg-dentry-flood): a projection, "
                "never a measurement (default: 4 GB, 256 GB and 3 TB only)")

RIG_HELP = ("a rig's name, found as RIG.toml in rigs/, then ~/.config/krig/rigs ($XDG_CONFIG_HOME/krig/rigs: "
            "`krig lab sim up` writes there), then each directory of KRIG_RIG_PATH (':'-separated); or a rig "
            "file's path")

SIMPLE_CODES = "exit codes: 0 done, 2 bad input (one line names what was wrong), 3 krig or the host broke"

MAIN_EPILOG = f"""examples:
  krig list
  krig run selftest-pass
  krig check results/latest

{RUN_CODES}
other subcommands answer with their own codes where they differ: `krig SUBCOMMAND --help`
see README.md and docs/command.md"""

EPILOGS = {
    "run": f"""examples:
  krig run selftest-pass
  krig run neg-dentry-flood --preset smoke --kernel tiny-6.1 --repeat 4
  krig run neg-dentry-flood --preset smoke --sysctl vm.vfs_cache_pressure=200 --cmdline dhash_entries=65536

{RUN_CODES}
  with --repeat: the code of the most severe verdict the group had
  (CRASHED, HUNG, FAIL, ERROR, SKIP, PASS, in that order)
  a lab server's rig is checked as `krig rig check` does (its BMC login included, nothing powered)
  before any kernel is built: a FAIL is exit 2, a BMC that does not answer 3
see docs/verdicts.md, docs/results.md, docs/first-hour.md""",
    "check": f"""examples:
  krig check results/latest
  krig check results/latest --project 512G:64

{RUN_CODES}
see docs/verdicts.md""",
    "report": f"""examples:
  krig report results/latest
  krig report results/latest --project 512G --project 1T:128

{SIMPLE_CODES}
see docs/reports.md""",
    "bundle": f"""examples:
  krig bundle results/latest
  krig bundle results/latest --with-trace -o flood.tar.gz

{SIMPLE_CODES}
see docs/bug-reports.md""",
    "reproduce": """examples:
  krig reproduce krig-bundle-selftest-pass-20260101T000000Z.tar.gz
  krig reproduce flood.tar.gz --kernel tiny-6.1 --rig qemu-8g

exit codes (differ from run's: the answer is whether the rerun agrees with the bundle):
    0 the rerun's verdict is the bundled one
    1 the rerun's verdict differs (both are printed)
    2 bad input: not a bundle, a bundle krig does not understand, an unknown --rig or --kernel
    3 krig or the host broke
  130 interrupted
see docs/bug-reports.md""",
    "validate": """examples:
  krig kernel build tiny-6.1
  krig validate unlink-dentry-growth --base tiny-6.1 --series fix.mbox
  krig validate neg-dentry-flood --base tiny-6.1 --series knob.mbox --series-sysctl fs.negative-dentry-limit=10
  krig validate neg-dentry-flood --base tiny-6.1 --series-sysctl vm.vfs_cache_pressure=400   (knob-only A/B)

knobs: --sysctl and --cmdline apply to both sides; --series-sysctl and --series-cmdline to the patched
side only (a fix behind a knob that is off by default), --base-... to the base only

answers and exit codes (4 and 5 differ from run's SKIP and HUNG):
    0 fixed                    base FAILs, base+series PASSes, judged metrics significantly better
                               (with under 4 runs a side: on the verdicts alone, and says so)
    1 not fixed                base+series FAILs like the base
    2 (bad input)              one line naming the flag; nothing ran, no directory made
    3 inconclusive             runs not judged (ERROR, SKIP, ...), mixed verdicts, or no significant change
    4 base does not reproduce  the base must FAIL first
    5 regressed                a threshold crossed only with the series, or it crashed/hung only with it
  130 (interrupted)            the same command finishes it
writes validate.json, reply.mbox and reply.txt in the validation directory
see docs/validate.md""",
    "b4-check": """reads one message (a cover letter or a patch) on standard input, as b4 review gives it, and
prints b4's JSON list: pass = fixed; fail = not fixed or regressed; warn = inconclusive, base does
not reproduce, not finished, or no validation of this series yet.

wire it into b4 review (run in krig's checkout: git stores the command with its full path):
  git config --global b4.review-series-check-cmd "$PWD/.venv/bin/krig b4-check"
  git config --global b4.review-perpatch-check-cmd "$PWD/.venv/bin/krig b4-check"

example:
  krig b4-check < series.mbox

exit codes: 0 answered (whatever the answer), 2 bad input (empty standard input, no such --dir)
see docs/b4-review.md""",
    "qualify": """examples:
  krig qualify qualify/smoke.toml
  krig qualify qualify/ram-scaling.toml --fresh
  krig qualify qualify/seed-scale.toml --check

exit codes (differ from run's: one answer for the whole suite):
    0 every run finished as the suite expects
    1 every run finished, and some did not give the expected verdict (signoff.txt names them)
    2 bad input (the suite file, a rig, a reproducer; a rig that cannot boot a kernel asked or a host that
      cannot give a run: before anything is built)
    3 runs missing (an error stopped them): the same command finishes the suite
  130 interrupted: the same command finishes the suite
see docs/qualify.md""",
    "rig": """examples:
  krig rig check lab1
  krig rig check ~/lab/rigs/lab1.toml

exit codes: 0 every item ok, 1 an item to fix (its line names the rig file's field), 2 bad input
see docs/first-hour.md""",
    "rig check": """examples:
  krig rig check lab1
  krig rig check ~/lab/rigs/lab1.toml

Nothing is powered on or off, no boot override set, no log cleared; SSH is tried only when the
server is up already. With no fingerprint pinned, the TLS line prints the rig file's line that
pins the certificate the BMC presents (check it on the BMC's own screen first).
exit codes: 0 every item ok (`--` lines are not checked now), 1 an item to fix (its line names
the rig file's field), 2 bad input (the rig file does not load: one line names the field)
see docs/first-hour.md""",
    "lab": f"""examples:
  krig lab sync
  krig lab status
  krig lab sim up lab1
  krig lab sim list

{SIMPLE_CODES}
see docs/lab-coordinator.md""",
    "lab sync": f"""examples:
  KRIG_LAB_COORDINATOR=lab-coord:20408 krig lab sync
  KRIG_LAB_COORDINATOR=lab-coord:20408 krig lab sync r760-01

{SIMPLE_CODES} (the coordinator is unreachable)
see docs/lab-coordinator.md""",
    "lab status": f"""example:
  KRIG_LAB_COORDINATOR=lab-coord:20408 krig lab status

{SIMPLE_CODES} (the coordinator is unreachable)
see docs/lab-coordinator.md""",
    "lab sim": f"""examples (a lab server without hardware, docs/lab-server.md):
  krig lab sim up lab1 --memory 8G
  krig lab sim list
  krig run selftest-pass --rig lab1
  krig lab sim down lab1

{SIMPLE_CODES}
see docs/lab-server.md""",
    "lab sim up": f"""examples:
  krig lab sim up lab1
  krig lab sim up big --memory 256G
  krig lab sim up rf1 --bmc redfish

The first up builds the server's disk image (Debian 12, about 2 min, as root).
{SIMPLE_CODES} (the image cannot be built, the simulator did not start)
see docs/lab-server.md""",
    "lab sim down": f"""example:
  krig lab sim down lab1

{SIMPLE_CODES}
see docs/lab-server.md""",
    "lab sim list": """example:
  krig lab sim list

state: up (its BMC answers; the rig powers the server on), starting, or stopped (its
supervisor is gone: `krig lab sim down NAME` clears what it left)
exit codes: 0 listed (none is not an error)
see docs/lab-server.md""",
    "list": """example:
  krig list

exit codes: 0 (a kernel or rig that cannot be used is listed with the reason)
see docs/command.md""",
    "compare": """example (BASE and NEW: the group directories the two `krig run` print):
  krig run selftest-pass --repeat 4
  krig run selftest-pass --kernel tiny-6.1 --repeat 4
  krig compare BASE -- NEW
  krig compare --format lkp BASE -- NEW

exit codes (differ from run's): 0 compared (whatever changed; the text says what), 2 bad input
  (a directory that is not a run or group, runs of different reproducers, the same runs on both sides)
see docs/compare.md""",
    "export": f"""example:
  krig export kcidb results/qualify/smoke --origin mylab -o smoke.kcidb.json

{SIMPLE_CODES}
see docs/kcidb.md""",
    "export kcidb": f"""examples:
  krig export kcidb results/latest --origin mylab
  krig export kcidb results/qualify/smoke --origin mylab --submit https://kcidb.example.org --token-file ~/.kcidb-token

{SIMPLE_CODES} (a submission that failed: the server's answer in the line)
see docs/kcidb.md""",
    "trace": """example:
  krig trace stats results/latest/trace.dat --event sched:sched_switch --group-by prev_comm

exit codes: 0 counted, 2 bad input (not a trace.dat, an unknown event or field)
see docs/design.md""",
    "trace stats": """examples:
  krig trace stats results/latest/trace.dat --event sched:sched_switch
  krig trace stats results/latest/trace.dat --event sched:sched_switch --group-by prev_comm --json

exit codes: 0 counted, 2 bad input (not a trace.dat, an unknown event or field)
see docs/design.md""",
    "kernel": """examples:
  krig kernel build tiny-6.1
  krig kernel status

exit codes: 0 built (or shown), 2 bad input (an unknown kernel), 3 the build failed (one line says why)
see docs/kernels.md""",
    "kernel build": """examples:
  krig kernel build tiny-6.1
  krig kernel build linux-6.1 --force

exit codes: 0 built (or in the cache), 2 bad input (an unknown kernel, the distro kernel),
  3 the build failed (one line names the kernel and the error)
see docs/kernels.md""",
    "kernel status": """examples:
  krig kernel status
  krig kernel status tiny-6.1

exit codes: 0 shown, 2 bad input (an unknown kernel)
see docs/kernels.md""",
    "bisect": """examples:
  krig bisect demo
  krig bisect run --tree ~/linux --good v6.0 --bad v6.1 --repro unlink-dentry-growth --preset smoke

exit codes: 0 a first bad commit was found, 1 none was, 2 bad input, 3 krig or the host broke
see docs/bisect.md""",
    "bisect run": """examples:
  krig bisect run --tree ~/linux --good v6.0 --bad v6.1 --repro unlink-dentry-growth --preset smoke
  krig bisect run --tree ~/linux --good v6.0 --bad v6.1 --repro neg-dentry-flood --metric end_nr_negative --repeat 3

exit codes (differ from run's): 0 a first bad commit was found (printed, and in bisect.log),
  1 git bisect named none, 2 bad input (one line names the flag), 3 krig or the host broke
see docs/bisect.md""",
    "bisect demo": """examples:
  krig bisect demo
  krig bisect demo --metric end_nr_negative --repeat 3

exit codes (differ from run's): 0 the bisection named the injected commit, 1 it named another
  (or none), 2 bad input, 3 krig or the host broke
see docs/bisect.md""",
}


def subcommands(parser, path=()):
    """(path, parser) of every subcommand, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from subcommands(sub, path + (name,))


def apply(parser) -> None:
    """Each subcommand's epilog (raw: its lines as written here)."""
    for path, sub in subcommands(parser):
        text = EPILOGS.get(" ".join(path))
        if text:
            sub.epilog = text
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
