"""The reply to a series that `krig validate` writes: reply.mbox (one message, ready for
`git send-email` or a mail client's import) and reply.txt (its text).

    Subject: Re: <the series' subject>, In-Reply-To/References: the series' Message-ID
    From: git config user.name/user.email (or --from); the Tested-by: trailer carries
          the same address, since b4 drops a trailer whose address is not the sender's
    the answer in one sentence; Tested-by: only when the answer is "fixed"
    Cc: the lists and people the series went to (its To, Cc and List-Post)
    Tested on: base and patched kernel releases, base commit, the tree by its public
          name (its origin URL; never the tester's local path), patchset hash,
          rig (CPUs, RAM, accelerator), host CPU, reproducer, runs, krig version and commit
    what the reproducer measures and its limit, in one sentence (repro.toml's measures)
    what differs between the two sides (debug options, CPU facts), if anything
    the judged metrics in the 0-day layout (analysis/lkp.py) with p-values and runs
    what the reproducer says each side showed, and the patched kernel's projection to
          other machine sizes where it has a model (labelled as a projection)
    the command that reproduces it, with the tree as ./linux (a clone of its public URL
          when it has one) and the series as its Message-ID or file name

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
from kernels.given import is_path, kernel_text
from krig.errors import KrigError, UsageError
from krig.safeio import printable_text
from krig.record_compare import Comparison
from krig.record_validation import ServerFacts, SideKernel, ValidationRecord
from krig.reproducer import load_reproducer
from krig.results import is_url, public_repository, public_url
from krig.version import git_revision, origin, version

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
    """ASCII text without a control character but newline and tab (a server's release, model or
    firmware may hold an escape sequence: shown as \\xNN, never sent)."""
    return printable_text(s).encode("ascii", "replace").decode()


def _one_line(s) -> str:
    """A header value as one line: every run of whitespace (a fold, a CR, a tab) one space."""
    return " ".join(str(s).split())


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


def _rig_line(k: SideKernel) -> str:
    m, rig = k.machine_said, k.rig
    mem = f"{m.mem_total_bytes / (1 << 30):.1f} GiB" if m.mem_total_bytes else "? GiB"
    accel = (k.rig_facts or {}).get("accel") or rig.kind or "?"
    return f"{_known(rig.name)}: {_known(m.cpus)} CPUs, {mem}, {accel}"


def _known(value) -> str:
    """A fact as the reply says it: ? when it was not recorded."""
    return "?" if value is None else str(value)


def server_line(s: ServerFacts) -> str:
    """A lab server's facts in one line (workflows.validate.server_facts)."""
    ram = f"{s.ram_bytes / (1 << 30):.1f} GiB" if s.ram_bytes else "? GiB"
    return (f"{s.system or '?'}, firmware {s.firmware or '?'}, {ram}, {s.cpus or '?'} x "
            f"{s.cpu or '?'}; BMC {s.bmc or '?'}")


def _cpu_line(cpu: dict | None) -> str:
    cpu = cpu or {}
    parts = [cpu.get("model") or "?"]
    for k in ("governor", "turbo"):
        if cpu.get(k):
            parts.append(f"{k} {cpu[k]}")
    if cpu.get("mhz"):
        parts.append(f"{cpu['mhz']} MHz")
    return ", ".join(parts)


def outcome_lines(res: Comparison) -> list:
    """What the reproducer says of each side (where the flood's negatives went), and the patched
    kernel's projection to other machine sizes, labelled as one."""
    out = []
    said = [(label, res.side(side).outcome) for side, label in (("base", "base"), ("new", "patched"))]
    if any(text for _, text in said):
        out += ["", "What the runs showed:"]
        for label, text in said:
            if text:
                out += _para_indented(f"{label}: {text}")
    proj = res.new.projection
    if proj:
        out += ["", "Projected to other machines from the patched kernel's median run", "(not a measurement):"]
        out += _para_indented(proj["basis"] + ".")
        out += ["", *("  " + line for line in projection_lines(proj))]
    return out


def _para_indented(text: str) -> list:
    return textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)


def public_tree(repository) -> str | None:
    """A tree's public name: its origin URL (credentials taken out); None for a local path."""
    return public_repository(repository) if repository and is_url(str(repository)) else None


def measures(reproducer: str) -> str | None:
    try:
        return load_reproducer(reproducer).measures or None
    except KrigError:
        return None


def reproduce_lines(state: ValidationRecord, tree: str | None, by_id: bool) -> list:
    """The command that reproduces the answer on anyone's machine: a base given as a path
    (TREE@REF, a built tree, an image) is named ./linux (@REF a commit, not a local branch),
    after a `git clone` of the tree's public URL when it has one; the series by its
    Message-ID, or by its file name."""
    cmd, git = list(state.command), (state.base_kernel.git if state.base_kernel else None) or {}
    cloned = False
    if "--base" in cmd:
        i = cmd.index("--base") + 1
        base = kernel_text(cmd[i])
        if is_path(base.head):
            image = not base.at and pathlib.PurePath(base.head).suffix
            pinned = base.ref and (git.get("commit") or base.ref)       # the commit a local branch was
            cmd[i] = base.public(tree_as=None if image else "linux", ref_as=pinned)
            cloned = bool(base.at)
    if "--series" in cmd:
        i = cmd.index("--series") + 1
        cmd[i] = f"<{state.series}>" if by_id else pathlib.Path(cmd[i]).name
    said = "b4 fetches the series by its Message-ID" if by_id else "with the series saved as an mbox"
    if cloned and not tree:
        said += "; ./linux: a clone of the tree holding the base commit"
    clone = wrap_shell(["git", "clone", tree, "linux"]) if cloned and tree else []
    return [*_para(f"To reproduce (krig; {said}):"), *clone, *wrap_shell(cmd)]


def knob_lines(knobs: dict | None) -> list:
    """Each side's knobs (--sysctl, --cmdline), one line a knob: `  patched knob    sysctl N=V`."""
    out = []
    for side, label in (("base", "base knob"), ("series", "patched knob")):
        for word in (knobs or {}).get(side) or []:
            out += textwrap.wrap(_ascii(word), WIDTH, initial_indent=f"  {label:16s}", subsequent_indent=" " * 18)
    return out


def body(state: ValidationRecord, res: Comparison | None, who: tuple) -> str:
    prov = state.series_provenance
    base, new = state.base_kernel or SideKernel(), state.new_kernel or SideKernel()
    assert state.reason is not None and state.reproducer is not None, "a reply is to an answered validation"
    out: list[str | None] = ["Hi,", ""]
    what = "this series" if state.series else "these knobs (one kernel, with and without them)"
    out += _para(f"krig's {state.reproducer} reproducer on {what}: {state.answer}. "
                 f"{state.reason[0].upper()}{state.reason[1:]}.")
    said = measures(state.reproducer)
    if said:
        out += ["", *_para(said)]
    if state.answer == "fixed":
        out += ["", f"Tested-by: {_ascii(who[0])} <{who[1]}>"]
    git = base.git or {}
    out += ["", "Tested on:",
            f"  base kernel     {_known(base.release)}",
            f"  patched kernel  {_known(new.release)}",
            *knob_lines(state.knobs),
            f"  base commit     {git.get('commit') or prov.base_commit or '-'}"]
    tree = public_tree(git.get("repository"))
    if tree:
        out += wrap_shell([f"  tree            {tree}" + (f" ({git['branch']})" if git.get("branch") else "")],
                          indent="", quote=False)
    elif git.get("repository"):
        out += ["  tree            a local tree (no public remote)"]
    out += ["  patchset hash (sha256 of each patch's sha256, KCIDB)", f"    {prov.patchset_hash}",
            f"  rig             {_rig_line(base)}",
            f"  machine CPU     {_cpu_line(base.machine_said.cpu)}",
            *(textwrap.wrap(_ascii(server_line(state.server)), WIDTH, initial_indent="  server          ",
                            subsequent_indent=" " * 18) if state.server else []),
            f"  host CPU        {_cpu_line(base.host_cpu)}",
            f"  reproducer      {state.reproducer}, preset {state.preset or 'defaults'}",
            f"  runs            base {res.base.verdict_text}, patched {res.new.verdict_text}"
            if res else "  runs            the first run a side PASSed; nothing more ran",
            f"                  ({state.repeat} a side, alternating)" if res else None,
            f"  krig            version {state.krig_version or version()}, commit",
            f"                  {state.krig_revision or git_revision()}",
            f"                  from {public_url(origin())}" if origin() else None]
    if state.differences:
        out += ["", "Not comparable, the two sides differ in:"]
        out += [f"  {d}" for d in state.differences]
    if res:
        out += ["", "Judged metrics (means of the judged runs; p: Mann-Whitney U,",
                f"two-sided, * = significant at p < {res.alpha} with >= {res.min_n_per_side} runs a "
                "side):", ""]
        out += table_lines(res, state.judged_metrics)
        out += outcome_lines(res)
    # a series named by its Message-ID is fetched the same way anywhere; a file is named by its name
    by_id = bool(state.series) and not str(state.series).startswith("/")
    out += ["", *reproduce_lines(state, tree, by_id)]
    out += ["", "-- ", "krig validate (automated test; the numbers come from the runs above)"]
    return "\n".join(_ascii(line).rstrip() if line != "-- " else line for line in out if line is not None) + "\n"


def message(state: ValidationRecord, text: str, who: tuple) -> str:
    prov = state.series_provenance
    subject = _one_line(state.reply_subject or prov.subject or "") or "your series"
    subject = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    domain = who[1].rpartition("@")[2]
    headers = [("From", email.utils.formataddr(who, "utf-8")),
               ("To", email.utils.formataddr(email.utils.parseaddr(_one_line(prov.author or "")), "utf-8")
                if _one_line(prov.author or "") else None),
               ("Cc", ", ".join(email.utils.formataddr(email.utils.parseaddr(_one_line(a)), "utf-8")
                                for a in prov.cc or []
                                if email.utils.parseaddr(_one_line(a))[1].lower() != who[1].lower()) or None),
               ("Subject", _ascii(subject)),
               ("Date", email.utils.formatdate(usegmt=True)),
               ("Message-ID", email.utils.make_msgid("krig-validate", domain)),
               ("In-Reply-To", f"<{prov.message_id}>" if prov.message_id else None),
               ("References", f"<{prov.message_id}>" if prov.message_id else None),
               ("MIME-Version", "1.0"), ("Content-Type", 'text/plain; charset="us-ascii"'),
               ("Content-Transfer-Encoding", "7bit")]
    # every header one line: a folded From: or Subject: of the series (a newline and a
    # whitespace-only line inside) would end the headers early in git send-email and mailers
    head = "".join(f"{k}: {_one_line(v)}\n" for k, v in headers if v and _one_line(v))
    return head + "\n" + text


def write_reply(vdir: pathlib.Path, state: ValidationRecord, res: Comparison | None, who: tuple) -> None:
    text = body(state, res, who)
    msg = message(state, text, who)
    stamp = time.asctime(time.gmtime())
    (vdir / "reply.mbox").write_text(f"From krig-validate {stamp}\n" + re.sub(r"(?m)^From ", ">From ", msg))
    (vdir / "reply.txt").write_text(text)
