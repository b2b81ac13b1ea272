"""krig command line. Exit codes: see krig.verdict.VERDICTS (2 = bad input).

The parser is only declared here: each subcommand names its handler as "module:function"
(set_defaults(handler=...)), a function of the parsed arguments that returns the exit code,
imported when that subcommand runs (krig.errors.handler). Building the parser imports no
workflow and no plotting or statistics library, so `krig --help` and `krig b4-check` start
in a fraction of the time the runner takes to import (tests/workflows/test_startup_imports.py)."""
import argparse
import os
import re
import sys

# numpy's OpenBLAS starts a thread per core at import that spins for a while: on 2 cores
# that took 0.04-0.06 s of CPU from `krig trace stats`' own threads (README, Benchmarks).
# krig does no linear algebra worth a thread; a user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from kernels import buildargs
from krig import DEFAULT_KERNEL, DEFAULT_RIG
from . import bisectargs, clihelp, historyargs
from .argcheck import add_knobs, ascii_float, ascii_int
from .clihelp import KERNEL_HELP, PROJECT_HELP, RIG_HELP
from krig.errors import guarded, handler
from krig.verdict import USAGE_EXIT


class _Parser(argparse.ArgumentParser):
    """Errors as one line naming what was typed; a missing subcommand prints the usage and the
    subcommands (exit 2 either way)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value such as -5G is the option's value, refused by the option's own check (one line
        # saying what is allowed), not taken for an unknown option ("expected one argument")
        self._negative_number_matcher = re.compile(r"^-\d")

    def _subcommands(self):
        return next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)

    def error(self, message):
        sub = self._subcommands()
        if sub is not None and message == f"the following arguments are required: {sub.metavar}":
            lines = [f"  {c.dest:12s} {c.help}" for c in sub._choices_actions]
            self.exit(USAGE_EXIT, f"{self.format_usage()}{self.prog}: a subcommand is needed, one of:\n"
                      + "\n".join(lines) + f"\n`{self.prog} SUBCOMMAND --help` has examples\n")
        m = re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from .*\)$", message)
        if sub is not None and m and m.group(1) == sub.metavar:
            self.exit(USAGE_EXIT, f"{self.prog}: {m.group(2)!r} is not a subcommand; one of: "
                      f"{', '.join(sub.choices)} (`{self.prog} --help` says what each does)\n")
        self.exit(USAGE_EXIT, f"{self.prog}: {message} (`{self.prog} --help` has the usage and examples)\n")


class _Version(argparse.Action):
    """--version: the version and the checkout's commit, computed only when asked."""

    def __call__(self, parser, namespace, values, option_string=None):
        from krig.version import version_line
        print(version_line())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="krig", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Kernel reproducer rig: boot a kernel on a rig, run a reproducer, judge it.",
                epilog=clihelp.MAIN_EPILOG)
    p.add_argument("--version", action=_Version, nargs=0,
                   help="print krig's version and the git commit of its checkout, and exit")
    add_quiet(p, False)
    sub = p.add_subparsers(dest="cmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser)
    add_run_commands(sub)
    add_share_commands(sub)
    add_series_commands(sub)
    add_lab_commands(sub)
    ls = sub.add_parser("list", help="list reproducers, presets, rigs and kernels")
    ls.set_defaults(handler="workflows.listing:cmd_list")
    add_reading_commands(sub)
    historyargs.add_history_commands(sub, _Parser)
    k = sub.add_parser("kernel", help="build kernels from kernels/<name>.toml (cached) and show the cache")
    buildargs.add_commands(k.add_subparsers(dest="kcmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser))
    bs = sub.add_parser("bisect", help="git bisect a kernel tree with a reproducer's verdict (or a metric)")
    bisectargs.add_commands(bs.add_subparsers(dest="bcmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser))
    clihelp.apply(p)
    return p


def add_quiet(p, default=argparse.SUPPRESS) -> None:
    """-q: long waits (a boot, the workload, a lab server's power and POST) say nothing on the terminal."""
    p.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="no progress lines on the terminal; they still go to each run's krig.log (default: "
                   "one line at least every 30 s of a long wait, saying what krig waits for)")


def add_run_commands(sub) -> None:
    """`krig run`, and `krig check` and `krig report` of a run."""
    r = sub.add_parser("run", help="run a reproducer on a rig")
    r.add_argument("reproducer", metavar="REPRODUCER", help="a reproducer's name (reproducers/<NAME>; see `krig list`)")
    r.add_argument("--rig", default=DEFAULT_RIG, help=f"{RIG_HELP} (default qemu-default)")
    r.add_argument("--kernel", default=DEFAULT_KERNEL, metavar="KERNEL", help=KERNEL_HELP)
    r.add_argument("--preset", default=None, help="one of the reproducer's presets (default: its defaults)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a parameter (repeatable; default none)")
    add_knobs(r)
    r.add_argument("--repeat", type=ascii_int, metavar="N", help="N runs as one group (group.json; default one run)")
    r.add_argument("--group", metavar="DIR", help="the group directory to make or continue "
                   "(default results/<repro>/<kernel>/<rig>/group-<time>)")
    add_quiet(r)
    r.set_defaults(handler="workflows.group:cmd_run")
    c = sub.add_parser("check", help="re-run the analysis of an existing run directory")
    c.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (any copy of one; results/latest is the newest run)")
    c.add_argument("--project", action="append", metavar="RAM[:CPUS]", help=PROJECT_HELP)
    c.set_defaults(handler="workflows.check:cmd_check")
    rp = sub.add_parser("report", help="write report.html, plots, summary.txt and trace.kshark.json of a run")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (results/latest is the newest run)")
    rp.add_argument("--project", action="append", metavar="RAM[:CPUS]", help=PROJECT_HELP)
    rp.set_defaults(handler="analysis.report:cmd_report")


def add_share_commands(sub) -> None:
    """`krig bundle` a run, and `krig reproduce` a bundle."""
    b = sub.add_parser("bundle", help="one tarball of a run that anyone reruns with `krig reproduce`")
    b.add_argument("run_dir", metavar="RUN_DIR", help="a judged run directory (results/latest is the newest run)")
    b.add_argument("--with-trace", action="store_true", help="include trace.dat (left out by default)")
    b.add_argument("--with-kernel", action="store_true",
                   help="include the kernel image, its config, modules and their sha256 sums (left out by default; "
                   "only a kernel krig keeps: built or unpacked in its cache, or the distro's)")
    b.add_argument("--with-config", action="store_true",
                   help="include the kernel's .config (left out by default; only a kernel krig keeps)")
    b.add_argument("-o", "--output", metavar="FILE", help="where the tarball goes "
                   "(default ./krig-bundle-<repro>-<time>.tar.gz in the current directory)")
    b.set_defaults(handler="workflows.bundle:cmd_bundle")
    rr = sub.add_parser("reproduce", help="rerun a bundle from its data (bundle.json, run-args); runs no file "
                        "from the bundle")
    rr.add_argument("bundle", metavar="BUNDLE.tar.gz", help="a bundle written by krig bundle")
    rr.add_argument("--kernel", metavar="KERNEL", help="the kernel to run (default: the bundle's kernel argument "
                    "or name; a bundled image with --with-kernel is used only when given as bundled); on a lab "
                    "server, KERNEL,drivers=RIG builds in its network card and disk drivers")
    rr.add_argument("--rig", default=DEFAULT_RIG, metavar="RIG", help=f"the rig: {RIG_HELP} (default qemu-default)")
    add_quiet(rr)
    rr.set_defaults(handler="workflows.reproduce:cmd_reproduce")


def add_series_commands(sub) -> None:
    """`krig validate` a patch series, and `krig b4-check` for b4."""
    v = sub.add_parser("validate",
                       help="does a patch series fix a reproducer's regression? base vs base+series, a reply")
    v.add_argument("reproducer", metavar="REPRODUCER", help="a reproducer's name (reproducers/<NAME>; see `krig list`)")
    v.add_argument("--base", required=True, metavar="KERNEL",
                   help="the kernel the series applies to: a built kernel toml (tiny-6.1) or TREE@REF "
                   "(TREE@ = the series' base-commit), with ,like=KERNEL for a git tree's config and "
                   ",drivers=RIG for a lab server's network card and disk drivers (tiny-6.1,drivers=lab1)")
    v.add_argument("--series", metavar="MBOX|MSGID",
                   help="the series: an mbox (git format-patch --cover-letter, b4 am, a list thread; .gz too), "
                   "a directory of patches, or the Message-ID of its posting (<id@host>, or a lore URL; "
                   "fetched once with b4 mbox from b4.midmask, lore.kernel.org by default); without it, a knob-only "
                   "A/B: --base's kernel on both sides, with and without --series-sysctl/--series-cmdline")
    v.add_argument("--repeat", type=ascii_int, default=4, metavar="N",
                   help="runs a side, alternating (default 4, the fewest that can be significant)")
    v.add_argument("--rig", default=DEFAULT_RIG, metavar="RIG", help=f"the rig both kernels run on: {RIG_HELP} "
                   "(default qemu-default)")
    v.add_argument("--preset", default=None, help="the reproducer's preset (default: its defaults)")
    v.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a parameter on both sides (repeatable; default none)")
    add_knobs(v, side=" of both sides")
    add_knobs(v, "series-", " on the patched side only: the usual way to validate a series whose fix is behind "
              "a knob (off by default), or, without --series, a knob-only A/B of --base's kernel")
    add_knobs(v, "base-", " on the base side only")
    v.add_argument("-o", "--output", metavar="DIR",
                   help="the validation directory (default results/validate/<repro>-<patchset>-<key>)")
    v.add_argument("--from", dest="sender", metavar="'NAME <ADDR>'",
                   help="the reply's sender and Tested-by (default: git config user.name/user.email)")
    add_quiet(v)
    v.set_defaults(handler="workflows.validate:cmd_validate")
    b4c = sub.add_parser("b4-check", help="krig's validations of a series as a `b4 review` check (JSON on stdout)")
    b4c.add_argument("--dir", action="append", metavar="DIR",
                     help="a validation directory (krig validate -o DIR) or a directory of them (repeatable; "
                     "default results/validate)")
    b4c.set_defaults(handler="workflows.b4check:cmd_b4_check")


def add_lab_commands(sub) -> None:
    """`krig qualify` rigs with a suite, and `krig lab` (its coordinator, a simulated server)."""
    q = sub.add_parser("qualify", help="run a qualification suite: reproducers x kernels x rigs x repeats")
    q.add_argument("suite", metavar="SUITE.toml", help="a qualification suite file (e.g. qualify/smoke.toml)")
    q.add_argument("-o", "--output", metavar="DIR", help="qualification directory (default results/qualify/<suite>)")
    q.add_argument("--fresh", action="store_true", help="forget the finished runs recorded in DIR and start over "
                   "(default: resume)")
    q.add_argument("--prio", type=ascii_float, metavar="N",
                   help="priority of this suite's lab reservations with KRIG_LAB_COORDINATOR; higher goes first "
                        "(default KRIG_LAB_PRIO or 0)")
    q.add_argument("--rig", action="append", metavar="RIG",
                   help=f"run every entry on this rig instead of the suite's rigs: {RIG_HELP} (repeatable; "
                   "default the suite's)")
    add_knobs(q, side=" of every run of the suite (after a run's own sysctl and cmdline lists)")
    q.add_argument("--check", action="store_true", help="only check the suite, its rigs (each boots its kernels) "
                   "and the host budget of each run, then exit: nothing built or run (default: run the suite)")
    q.add_argument("--include-unhealthy", action="store_true", help="run on servers the history calls unhealthy "
                   "too (default: leave them out, one line each; krig history health)")
    add_quiet(q)
    q.set_defaults(handler="workflows.qualify:cmd_qualify")
    lb = sub.add_parser("lab", help="the lab: its labgrid coordinator (KRIG_LAB_COORDINATOR=HOST:PORT), and "
                        "simulated lab servers on this machine (krig lab sim)")
    lsub = lb.add_subparsers(dest="lcmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser)
    sy = lsub.add_parser("sync", help="create or update a place per lab server rig (IPMI or Redfish), tags from its [lab] "
                          "table")
    sy.add_argument("rigs", nargs="*", metavar="RIG", help="rig names (default: every IPMI and Redfish rig found)")
    sy.set_defaults(handler="workflows.lab:cmd_sync")
    st = lsub.add_parser("status", help="each place: free, allocated or locked (by whom, since, lease); "
                                        "waiting reservations in priority order")
    st.set_defaults(handler="workflows.lab:cmd_status")
    sim = lsub.add_parser("sim", help="a simulated lab server on this machine (an ipmi_sim or sushy-emulator "
                          "BMC, UEFI, SSH): "
                          "krig lab sim up NAME / down NAME / list")
    simsub = sim.add_subparsers(dest="scmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser)
    su = simsub.add_parser("up", help="start it; its last line is the rig file's path (--rig NAME)")
    su.add_argument("name", metavar="NAME", help="the server's name and rig name (lower-case letters, digits, -)")
    su.add_argument("--memory", metavar="SIZE", help="its RAM, 1G-64T; sparse above the host's RAM (default 2G)")
    su.add_argument("--owner", metavar="PID", type=ascii_int, help="stop it by itself when process PID ends (a CI job's shell, a "
                    "test session; default: it runs until `krig lab sim down NAME`)")
    su.add_argument("--nic", metavar="MODEL", help="its network card: virtio-net (default), e1000e or e1000 "
                    "(a card the kernel under test may lack a driver for: --kernel KERNEL,drivers=NAME)")
    su.add_argument("--bmc", choices=("ipmi", "redfish"), default="ipmi",
                    help="its BMC: ipmi (ipmi_sim, SOL; default) or redfish (sushy-emulator over libvirt, "
                    "console through ser2net on a Unix socket; as root its parts run as krig-lab)")
    su.set_defaults(handler="workflows.lab:cmd_sim_up")
    sd = simsub.add_parser("down", help="stop it: nothing of it left running, its rig file and secret removed")
    sd.add_argument("name", metavar="NAME", help="the name given to up")
    sd.set_defaults(handler="workflows.lab:cmd_sim_down")
    sl = simsub.add_parser("list", help="each simulated server of this user: name, state (up, starting, stopped), "
                           "memory, BMC (ipmi or redfish) and its port, network card, SSH port, owner, rig file")
    sl.set_defaults(handler="workflows.lab:cmd_sim_list")
    rg = sub.add_parser("rig", help="a rig itself: krig rig check RIG")
    rsub = rg.add_subparsers(dest="rcmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser)
    rc = rsub.add_parser("check", help="check a rig without powering anything or booting a kernel: the rig file, "
                         "secrets, the BMC's TLS, login, privileges and system, the console, SSH when the server "
                         "is up, the drivers kept; one line an item; exit 0 all ok, 1 not, 2 a bad rig file")
    rc.add_argument("rig", metavar="RIG", help=RIG_HELP)
    rc.set_defaults(handler="workflows.rigcheck:cmd_rig_check")


def add_reading_commands(sub) -> None:
    """`krig compare` runs, `krig export` them, `krig trace` a trace.dat."""
    cmp = sub.add_parser("compare", help="compare runs or groups of two kernels: krig compare BASE... -- NEW...",
                         usage="krig compare [--json | --format text|lkp] [--out DIR] BASE... -- NEW...")
    cmp.add_argument("--json", action="store_true", help="the comparison as JSON (default: text)")
    cmp.add_argument("--format", choices=("text", "lkp"), default="text",
                     help="text (default), or lkp: the 0-day robot's %%stddev %%change table, 72 columns")
    cmp.add_argument("--out", metavar="DIR", help="where compare.html goes (default results/compare/<repro>-<time>)")
    cmp.add_argument("dirs", nargs=argparse.REMAINDER, metavar="BASE... -- NEW...",
                     help="run or group directories of the base kernel, `--`, then those of the new one")
    cmp.set_defaults(handler="workflows.compare:cmd_compare")
    ex = sub.add_parser("export", help="runs in other systems' formats: krig export kcidb ...")
    exsub = ex.add_subparsers(dest="ecmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser)
    kc = exsub.add_parser("kcidb", help="runs, groups or qualifications as a KCIDB v5.3 report for KernelCI "
                          "(docs/kcidb.md)", usage="krig export kcidb RUN|GROUP|QUALIFY_DIR... --origin NAME "
                          "[-o FILE] [--submit URL --token-file FILE]")
    kc.add_argument("paths", nargs="+", metavar="RUN|GROUP|QUALIFY_DIR",
                    help="run directories, group directories (krig run --repeat) or qualification "
                    "directories (krig qualify)")
    kc.add_argument("--origin", required=True, metavar="NAME",
                    help="required: your lab's KCIDB origin as KernelCI registered it "
                    "(lower-case letters, digits, _; no default)")
    kc.add_argument("-o", "--output", metavar="FILE",
                    help="write the report to FILE (default: standard output, or nothing with --submit)")
    kc.add_argument("--submit", metavar="URL", help="POST the report to a KCIDB-ng server (its base URL or its "
                    "/submit endpoint) and print the submission id; needs --token-file (default: not sent)")
    kc.add_argument("--token-file", metavar="FILE",
                    help="the origin's KCIDB-ng token on the first line of a file of mode 0600 (with --submit; no default)")
    kc.set_defaults(handler="workflows.kcidb:cmd_export")
    t = sub.add_parser("trace", help="read trace.dat files")
    tsub = t.add_subparsers(dest="tcmd", metavar="SUBCOMMAND", required=True, parser_class=_Parser)
    ts = tsub.add_parser("stats", help="count an event, optionally grouped by a field")
    ts.add_argument("trace", metavar="TRACE.DAT", help="a trace.dat file (a run directory has one when its reproducer traces)")
    ts.add_argument("--event", required=True, metavar="SYSTEM:EVENT", help="the event to count (required)")
    ts.add_argument("--group-by", metavar="FIELD", help="count per value of this field (default: one total)")
    ts.add_argument("--json", action="store_true", help="the counts as JSON (default: text)")
    ts.set_defaults(handler="analysis.trace.tracecli:cmd_stats")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.quiet:              # in the environment: qualify's and bisect's worker processes inherit it
        os.environ["KRIG_QUIET"] = "1"

    def call():
        try:
            return handler(args.handler)(args)
        except BrokenPipeError:
            return 0
    return guarded(call)


if __name__ == "__main__":
    sys.exit(main())
