"""krig command line. Exit codes: see krig.verdict.VERDICTS (2 = bad input)."""
import argparse
import os
import sys

# numpy's OpenBLAS starts a thread per core at import that spins for a while: on 2 cores
# that took 0.04-0.06 s of CPU from `krig trace stats`' own threads (README, Benchmarks).
# krig does no linear algebra worth a thread; a user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .errors import KrigError, guarded
from .verdict import USAGE_EXIT, VERDICTS, exit_code


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(USAGE_EXIT, f"krig: {message}\n")


def cmd_run(a) -> int:
    from .config import parse_set
    from .run import run
    if a.repeat is not None or a.group:
        from .group import format_group, run_group
        gdir, group, code = run_group(a.reproducer, a.rig, a.kernel, a.preset, parse_set(a.set),
                                      1 if a.repeat is None else a.repeat, a.group)
        print(format_group(gdir, group))
        return code
    run_dir, verdict = run(a.reproducer, a.rig, a.kernel, a.preset, parse_set(a.set))
    print(f"{verdict['verdict']}: {verdict['reason']}")
    print(f"results: {run_dir}")
    return exit_code(verdict["verdict"])


def cmd_check(a) -> int:
    from .check import check
    verdict = check(a.run_dir)
    print(f"{verdict['verdict']}: {verdict['reason']}")
    return exit_code(verdict["verdict"])


def cmd_report(a) -> int:
    from analysis.report import write_report
    res = write_report(a.run_dir)
    for note in res["notes"]:
        print(f"krig: report: {note}", file=sys.stderr)
    for f in res["files"]:
        print(f)
    return 0


def cmd_list(a) -> int:
    from kernels.catalog import kernel_names, load_kernel
    from .reproducer import load_reproducer, reproducer_names
    from rigs import load_rig, rig_names
    print("reproducers:")
    for n in reproducer_names():
        r = load_reproducer(n)
        first = r.description.splitlines()[0] if r.description else ""
        print(f"  {n:24s} presets: {', '.join(sorted(r.presets)) or '-':26s} {first}")
    print("rigs:")
    for n in rig_names():
        try:
            rig = load_rig(n)
            print(f"  {n:24s} {rig.kind:6s} {rig.spec.get('description', '')}")
        except KrigError as e:
            print(f"  {n:24s} INVALID: {e}")
    print("kernels:")
    not_built = False
    for n in kernel_names():
        try:
            k = load_kernel(n)
            print(f"  {n:32s} {k.release:40s} {k.description}")
        except KrigError as e:
            if type(e).__name__ == "KernelNotBuilt":
                print(f"  {n:32s} {'(not built)':40s} {e.description}")
                not_built = True
            else:
                print(f"  {n:32s} (not available: {e})")
    if not_built:
        print("  (build one with `make kernel KERNEL=<name>`)")
    return 0


def cmd_bundle(a) -> int:
    from .bundle import bundle
    bundle(a.run_dir, a.output, a.with_trace)
    return 0


def cmd_qualify(a) -> int:
    from .qualify import qualify
    return qualify(a.suite, a.output, a.fresh, prio=a.prio)


def cmd_lab(a) -> int:
    from . import lab
    return lab.sync(a.rigs or None) if a.lcmd == "sync" else lab.status()


def cmd_compare(a) -> int:
    from .compare import main as compare_main
    return compare_main((["--json"] if a.json else []) + (["--out", a.out] if a.out else []) + a.args)


def cmd_trace_stats(a) -> int:
    from analysis.tracecli import stats_main
    from analysis.tracedat import TraceError
    try:
        return stats_main(a.trace, a.event, a.group_by, a.json)
    except TraceError as e:
        raise KrigError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    codes = "\n".join(f"  {c:3d} {v:12s} {m}" for v, (c, m) in VERDICTS.items())
    p = _Parser(prog="krig", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Kernel reproducer rig: boot a kernel on a rig, run a reproducer, judge it.",
                epilog=f"exit codes of `krig run` and `krig check`:\n{codes}\n    2 (bad input: one line names the field)")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run a reproducer on a rig")
    r.add_argument("reproducer")
    r.add_argument("--rig", default="qemu-default")
    r.add_argument("--kernel", default="distro")
    r.add_argument("--preset", default=None)
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a parameter (repeatable)")
    r.add_argument("--repeat", type=int, metavar="N", help="N runs as one group (group.json); see README")
    r.add_argument("--group", metavar="DIR", help="the group directory to make or continue (with --repeat)")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("check", help="re-run the analysis of an existing run directory")
    c.add_argument("run_dir")
    c.set_defaults(func=cmd_check)
    rp = sub.add_parser("report", help="write report.html, plots, summary.txt and trace.kshark.json of a run")
    rp.add_argument("run_dir")
    rp.set_defaults(func=cmd_report)
    b = sub.add_parser("bundle", help="one tarball of a run that a stranger reruns with its reproduce.sh")
    b.add_argument("run_dir")
    b.add_argument("--with-trace", action="store_true", help="include trace.dat (left out by default)")
    b.add_argument("-o", "--output", metavar="FILE", help="default: ./krig-bundle-<repro>-<time>.tar.gz")
    b.set_defaults(func=cmd_bundle)
    q = sub.add_parser("qualify", help="run a qualification suite: reproducers x kernels x rigs x repeats")
    q.add_argument("suite", metavar="SUITE.toml")
    q.add_argument("-o", "--output", metavar="DIR", help="qualification directory (default results/qualify/<suite>)")
    q.add_argument("--fresh", action="store_true", help="forget the finished runs recorded in DIR and start over")
    q.add_argument("--prio", type=float, metavar="N",
                   help="priority of this suite's lab reservations with KRIG_LAB_COORDINATOR; higher goes first "
                        "(default KRIG_LAB_PRIO or 0)")
    q.set_defaults(func=cmd_qualify)
    lb = sub.add_parser("lab", help="the lab's labgrid coordinator (KRIG_LAB_COORDINATOR=HOST:PORT)")
    lsub = lb.add_subparsers(dest="lcmd", required=True, parser_class=_Parser)
    sy = lsub.add_parser("sync", help="create or update a place per IPMI rig, tags from its [lab] table")
    sy.add_argument("rigs", nargs="*", metavar="RIG", help="rig names (default: every IPMI rig found)")
    sy.set_defaults(func=cmd_lab)
    st = lsub.add_parser("status", help="each place: free, allocated or locked (by whom, since, lease); "
                                        "waiting reservations in priority order")
    st.set_defaults(func=cmd_lab)
    ls = sub.add_parser("list", help="list reproducers, presets, rigs and kernels")
    ls.set_defaults(func=cmd_list)
    cmp = sub.add_parser("compare", help="compare runs or groups of two kernels: krig compare BASE... -- NEW...",
                         usage="krig compare [--json] [--out DIR] BASE... -- NEW...")
    cmp.add_argument("--json", action="store_true", help="the comparison as JSON")
    cmp.add_argument("--out", metavar="DIR", help="where compare.html goes (default results/compare/<repro>-<time>)")
    cmp.add_argument("args", nargs=argparse.REMAINDER, help="run or group directories, BASE... -- NEW...")
    cmp.set_defaults(func=cmd_compare)
    t = sub.add_parser("trace", help="read trace.dat files")
    tsub = t.add_subparsers(dest="tcmd", required=True, parser_class=_Parser)
    ts = tsub.add_parser("stats", help="count an event, optionally grouped by a field")
    ts.add_argument("trace")
    ts.add_argument("--event", required=True, metavar="SYSTEM:EVENT")
    ts.add_argument("--group-by", metavar="FIELD")
    ts.add_argument("--json", action="store_true")
    ts.set_defaults(func=cmd_trace_stats)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    def call():
        try:
            return args.func(args)
        except BrokenPipeError:
            return 0
    return guarded(call)


if __name__ == "__main__":
    sys.exit(main())
