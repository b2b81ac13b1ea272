"""`krig history`'s arguments (workflows/cli.py adds them; the handlers are
workflows/history/commands.py, imported only when the subcommand runs)."""
import argparse

from .argcheck import ascii_int

CODES = ("exit codes: 0 answered, 2 bad input or a store krig cannot use (newer than krig, a bad URL), "
         "3 the store did not answer (one line says why)")
PAGE = "see docs/history.md"
STORE = ("the store: KRIG_HISTORY_URL (a SQLAlchemy URL, or off), default SQLite at "
         "$KRIG_RESULTS/history.sqlite (results/history.sqlite)")

EPILOGS = {
    "history": f"""examples:
  krig history
  krig history --repro neg-dentry-flood --verdict FAIL --since 2026-01-01
  krig history import results
  krig history regressions

{STORE}
{CODES}
{PAGE}""",
    "import": f"""examples:
  krig history import results
  krig history import /srv/lab/results/qualify/nightly

runs already in the history are written again (an import is idempotent); a run directory
the safe reader refuses (links, FIFOs, oversized files) is named and left out
exit codes: 0 every run written, 2 a run directory refused or bad input, 3 the store did not answer
{PAGE}""",
    "trend": f"""examples:
  krig history trend peak_negative_pct_ram --repro neg-dentry-flood --sku qemu-2c-1g
  krig history trend peak_dentry_bytes --repro neg-dentry-flood --rig qemu-1g -o flood.png

{CODES}
{PAGE}""",
    "regressions": f"""examples:
  krig history regressions
  krig history regressions --active

a regression: a (reproducer, SKU, threshold) whose kernels, in version order (6.5 before 6.8,
an -rc before its release; one version's kernels in the order first run), went from passing to
failing with the same parameters; a kernel whose reruns disagree is flaky there
{CODES}
{PAGE}""",
    "health": f"""examples:
  krig history health
  krig history health -k 2 -m 4

unhealthy: K of a server's last M runs ended ERROR for a rig cause (rig, machine, host-fault);
krig qualify skips an unhealthy server unless --include-unhealthy, krig lab status marks it
{CODES}
{PAGE}""",
    "html": f"""examples:
  krig history html -o results/history-html

{CODES}
{PAGE}""",
}


def _parser(sub, name, parser_class, **kw):
    return sub.add_parser(name, epilog=EPILOGS[name], formatter_class=argparse.RawDescriptionHelpFormatter,
                          **kw)


def add_history_commands(sub, parser_class) -> None:
    h = _parser(sub, "history", parser_class, help="the results history: runs listed, trends, regressions, "
                "flaky results, server health (docs/history.md)")
    h.add_argument("--repro", metavar="NAME", help="only this reproducer's runs (default: all)")
    h.add_argument("--kernel", metavar="KERNEL", help="only this kernel's runs: its name, release or commit "
                   "(default: all)")
    h.add_argument("--rig", metavar="RIG", help="only runs on this rig (default: all)")
    h.add_argument("--server", metavar="NAME", help="only runs on this server: its rig name, model or SKU "
                   "(default: all)")
    h.add_argument("--verdict", metavar="VERDICT", help="only runs with this verdict, e.g. FAIL (default: all)")
    h.add_argument("--since", metavar="DATE", help="only runs started on or after DATE, YYYY-MM-DD (default: all)")
    h.add_argument("--limit", type=ascii_int, default=50, metavar="N", help="at most N runs, newest first "
                   "(default 50)")
    h.set_defaults(handler="workflows.history.commands:cmd_list")
    hs = h.add_subparsers(dest="hcmd", metavar="SUBCOMMAND", parser_class=parser_class)
    im = _parser(hs, "import", parser_class, help="write the run directories under DIR to the history "
                 "(idempotent)")
    im.add_argument("dirs", nargs="+", metavar="DIR", help="a results root, or any directory with run directories")
    im.set_defaults(handler="workflows.history.commands:cmd_import")
    tr = _parser(hs, "trend", parser_class, help="a metric across kernels: a table and a plot")
    tr.add_argument("metric", metavar="METRIC", help="a metric's name, as in a run's metrics.json")
    tr.add_argument("--repro", required=True, metavar="NAME", help="the reproducer (required)")
    which = tr.add_mutually_exclusive_group()
    which.add_argument("--rig", metavar="RIG", help="only runs on this rig (default: every machine)")
    which.add_argument("--server", metavar="MODEL", help="only runs on servers of this model (default: every machine)")
    which.add_argument("--sku", metavar="SKU", help="only runs on this SKU, as `krig history` lists it "
                       "(default: every machine)")
    tr.add_argument("-o", "--output", metavar="PNG", help="where the plot goes, `-` for none "
                    "(default trend-REPRO-METRIC.png)")
    tr.set_defaults(handler="workflows.history.commands:cmd_trend")
    rg = _parser(hs, "regressions", parser_class, help="PASS -> FAIL between kernels: last passing, first "
                 "failing, active or fixed, the bisect line; flaky results apart")
    rg.add_argument("--active", action="store_true", help="only regressions not fixed yet (default: all)")
    rg.set_defaults(handler="workflows.history.commands:cmd_regressions")
    he = _parser(hs, "health", parser_class, help="each server's last runs: unhealthy when K of the last M "
                 "ended ERROR for a rig cause")
    he.add_argument("-k", type=ascii_int, default=3, metavar="K", help="rig ERRORs that make a server unhealthy "
                    "(default 3)")
    he.add_argument("-m", type=ascii_int, default=5, metavar="M", help="the last runs looked at (default 5)")
    he.set_defaults(handler="workflows.history.commands:cmd_health")
    ht = _parser(hs, "html", parser_class, help="a static dashboard (opens offline): trends per SKU, "
                 "regressions, flaky results, server health")
    ht.add_argument("-o", "--output", required=True, metavar="DIR", help="the dashboard's directory (required)")
    ht.set_defaults(handler="workflows.history.commands:cmd_html")
