"""The reply to a series that `krig validate` writes: reply.mbox (one message, ready for
`git send-email` or a mail client's import) and reply.txt (its text).

    Subject: Re: <the series' subject>, In-Reply-To/References: the series' Message-ID
    From: git config user.name/user.email (or --from); the Tested-by: trailer carries
          the same address, since b4 drops a trailer whose address is not the sender's
    the answer in one sentence; Tested-by: only when the answer is "fixed"
    Tested on: base and patched kernel releases, base commit, tree, patchset hash,
          rig (CPUs, RAM, accelerator), host CPU, reproducer, runs, krig revision
    what differs between the two sides (debug options, CPU facts), if anything
    the judged metrics in the 0-day layout (analysis/lkp.py) with p-values and runs
    what the reproducer says each side showed, and the patched kernel's projection to
          other machine sizes where it has a model (labelled as a projection)
    the command that reproduces it

ASCII, at most 72 columns (a long path in the command is continued with a backslash).
"""
import email.utils
import pathlib
import re
import subprocess
import textwrap
import time

from analysis.lkp import WIDTH, table_lines
from analysis.projection import text_lines as projection_lines
from .errors import UsageError
from .results import git_revision, public_url

_ADDR = re.compile(r"^[^<>@\s]+@[^<>@\s]+\.[^<>@\s]+$")


def identity(sender: str | None) -> tuple[str, str]:
    """(name, address) from --from "Name <addr>", else git config user.name/user.email."""
    if sender:
        name, addr = email.utils.parseaddr(sender)
        if not _ADDR.match(addr or ""):
            raise UsageError(f"--from {sender!r}: expected 'Name <address>'")
        return name or addr, addr
    vals = []
    for key in ("user.name", "user.email"):
        p = subprocess.run(["git", "config", "--get", key], capture_output=True, text=True)
        vals.append(p.stdout.strip())
    if not vals[0] or not _ADDR.match(vals[1]):
        raise UsageError("--from: no sender for the reply: set `git config --global user.name/user.email` "
                         "or give --from 'Name <address>'")
    return vals[0], vals[1]


def _ascii(s: str) -> str:
    return s.encode("ascii", "replace").decode()


_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def shell_word(a: str) -> str:
    """A word as the shell reads it back: as is when safe, else in double quotes (where a
    backslash-newline still joins lines, unlike in single quotes)."""
    return a if _SAFE_WORD.match(a) else '"' + re.sub(r'([\\"$`])', r"\\\1", a) + '"'


def wrap_shell(argv: list, width: int = WIDTH, indent: str = "  ", quote: bool = True) -> list:
    """A command as lines of at most `width` columns, each word quoted as the shell needs; a
    word too long for a line is continued with a backslash-newline inside the word (the shell
    joins it back)."""
    lines, cur, words = [], indent, False      # words: cur holds a word (the next needs a space)
    for a in (map(shell_word, argv) if quote else argv):
        add = " " + a if words else a
        if len(cur) + len(add) + 2 <= width:
            cur, words = cur + add, True
            continue
        if words:
            lines.append(cur + " \\")
            cur = indent + "    "
        while len(cur) + len(a) + 2 > width:
            # a piece of the word stays for the next line: a word never ends in a backslash-newline,
            # which would join the next word onto it
            cut = min(width - len(cur) - 1, len(a) - 1)
            while cut > 1 and a[cut - 1] == "\\":      # never between an escape and what it escapes
                cut -= 1
            lines.append(cur + a[:cut] + "\\")
            a, cur = a[cut:], ""
        cur, words = cur + a, True
    lines.append(cur)
    return lines


def _para(text: str) -> list:
    return textwrap.wrap(_ascii(text), WIDTH, break_long_words=True, break_on_hyphens=False)


def _rig_line(k: dict) -> str:
    m, rig = k.get("machine") or {}, k.get("rig") or {}
    mem = f"{m['mem_total_bytes'] / (1 << 30):.1f} GiB" if m.get("mem_total_bytes") else "? GiB"
    accel = (k.get("rig_facts") or {}).get("accel") or rig.get("kind") or "?"
    return f"{rig.get('name', '?')}: {m.get('cpus', '?')} CPUs, {mem}, {accel}"


def server_line(s: dict) -> str:
    """A lab server's facts in one line (krig.validate.server_facts)."""
    ram = f"{s['ram_bytes'] / (1 << 30):.1f} GiB" if s.get("ram_bytes") else "? GiB"
    return (f"{s.get('system') or '?'}, firmware {s.get('firmware') or '?'}, {ram}, {s.get('cpus') or '?'} x "
            f"{s.get('cpu') or '?'}; BMC {s.get('bmc') or '?'}")


def _cpu_line(cpu: dict | None) -> str:
    cpu = cpu or {}
    parts = [cpu.get("model") or "?"]
    for k in ("governor", "turbo"):
        if cpu.get(k):
            parts.append(f"{k} {cpu[k]}")
    if cpu.get("mhz"):
        parts.append(f"{cpu['mhz']} MHz")
    return ", ".join(parts)


def outcome_lines(res: dict) -> list:
    """What the reproducer says of each side (where the flood's negatives went), and the patched
    kernel's projection to other machine sizes, labelled as one."""
    out = []
    said = [(label, res[side].get("outcome")) for side, label in (("base", "base"), ("new", "patched"))]
    if any(text for _, text in said):
        out += ["", "What the runs showed:"]
        for label, text in said:
            if text:
                out += _para_indented(f"{label}: {text}")
    proj = res["new"].get("projection")
    if proj:
        out += ["", "Projected to other machines from the patched kernel's median run", "(not a measurement):"]
        out += _para_indented(proj["basis"] + ".")
        out += ["", *("  " + line for line in projection_lines(proj))]
    return out


def _para_indented(text: str) -> list:
    return textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)


def body(state: dict, res: dict, who: tuple) -> str:
    prov = state["series_provenance"]
    base, new = state.get("base_kernel") or {}, state.get("new_kernel") or {}
    out = ["Hi,", ""]
    out += _para(f"krig's {state['reproducer']} reproducer on this series: {state['answer']}. "
                 f"{state['reason'][0].upper()}{state['reason'][1:]}.")
    if state["answer"] == "fixed":
        out += ["", f"Tested-by: {_ascii(who[0])} <{who[1]}>"]
    git = base.get("git") or {}
    out += ["", "Tested on:",
            f"  base kernel     {base.get('release', '?')}",
            f"  patched kernel  {new.get('release', '?')}",
            f"  base commit     {git.get('commit') or prov.get('base_commit') or '-'}"]
    if git.get("repository"):
        out += wrap_shell([f"  tree            {public_url(git['repository'])}"
                           + (f" ({git['branch']})" if git.get("branch") else "")], indent="", quote=False)
    out += ["  patchset hash (sha256 of each patch's sha256, KCIDB)", f"    {prov['patchset_hash']}",
            f"  rig             {_rig_line(base)}",
            f"  machine CPU     {_cpu_line((base.get('machine') or {}).get('cpu'))}",
            *(textwrap.wrap(_ascii(server_line(state["server"])), WIDTH, initial_indent="  server          ",
                            subsequent_indent=" " * 18) if state.get("server") else []),
            f"  host CPU        {_cpu_line(base.get('host_cpu'))}",
            f"  reproducer      {state['reproducer']}, preset {state['preset'] or 'defaults'}",
            f"  runs            base {res['base']['verdict_text']}, patched {res['new']['verdict_text']}"
            if res else "  runs            the first run a side PASSed; nothing more ran",
            f"                  ({state['repeat']} a side, alternating)" if res else None,
            f"  krig            {git_revision()}"]
    if state["differences"]:
        out += ["", "Not comparable, the two sides differ in:"]
        out += [f"  {d}" for d in state["differences"]]
    if res:
        out += ["", "Judged metrics (means of the judged runs; p: Mann-Whitney U,",
                f"two-sided, * = significant at p < {res['alpha']} with >= {res['min_n_per_side']} runs a "
                "side):", ""]
        out += table_lines(res, state["judged_metrics"])
        out += outcome_lines(res)
    # a series named by its Message-ID is fetched the same way anywhere; a file is named by its name
    by_id = bool(state.get("series")) and not str(state["series"]).startswith("/")
    out += ["", "To reproduce (krig; b4 fetches the series by its Message-ID):" if by_id else
            "To reproduce (krig, with the series saved as an mbox):"]
    cmd = list(state["command"])
    if "--series" in cmd:
        i = cmd.index("--series") + 1
        cmd[i] = f"<{state['series']}>" if by_id else pathlib.Path(cmd[i]).name
    out += wrap_shell(cmd)
    out += ["", "-- ", "krig validate (automated test; the numbers come from the runs above)"]
    return "\n".join(_ascii(line).rstrip() if line != "-- " else line for line in out if line is not None) + "\n"


def message(state: dict, text: str, who: tuple) -> str:
    prov = state["series_provenance"]
    subject = state.get("reply_subject") or prov.get("subject") or "your series"
    subject = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    domain = who[1].rpartition("@")[2]
    headers = [("From", email.utils.formataddr(who, "utf-8")),
               ("To", email.utils.formataddr(email.utils.parseaddr(prov.get("author") or ""), "utf-8")
                if prov.get("author") else None),
               ("Subject", _ascii(subject)),
               ("Date", email.utils.formatdate(usegmt=True)),
               ("Message-ID", email.utils.make_msgid("krig-validate", domain)),
               ("In-Reply-To", f"<{prov['message_id']}>" if prov.get("message_id") else None),
               ("References", f"<{prov['message_id']}>" if prov.get("message_id") else None),
               ("MIME-Version", "1.0"), ("Content-Type", 'text/plain; charset="us-ascii"'),
               ("Content-Transfer-Encoding", "7bit")]
    head = "".join(f"{k}: {v}\n" for k, v in headers if v)
    return head + "\n" + text


def write_reply(vdir: pathlib.Path, state: dict, res: dict, who: tuple) -> None:
    text = body(state, res, who)
    msg = message(state, text, who)
    stamp = time.asctime(time.gmtime())
    (vdir / "reply.mbox").write_text(f"From krig-validate {stamp}\n" + re.sub(r"(?m)^From ", ">From ", msg))
    (vdir / "reply.txt").write_text(text)
