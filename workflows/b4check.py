"""`krig b4-check`: krig's answer on a series, as a check of `b4 review`.

b4 review runs the commands of `b4.review-series-check-cmd` (on the cover letter, else
the first patch) and `b4.review-perpatch-check-cmd` (on each patch) with the message on
standard input and the reviewer's kernel tree as the working directory, and reads a JSON
list of {tool, status: pass|warn|fail, summary, url, details} from standard output.

This command looks for the validations `krig validate` made of that series (their
validate.json under results/validate/, or under the directories given with --dir) and
answers one entry per reproducer, from the newest validation:

    fixed                              pass
    not fixed, regressed               fail
    inconclusive, base does not reproduce, a validation not finished, none yet   warn

A validation is of the series when the message's Message-ID, In-Reply-To or References
name the Message-ID validate.json records (the cover letter's, else the first patch's),
or when the patches on standard input have the patchset hash it records (read the way
`krig validate` reads a series; a patch's headers count, so this finds the very mbox that
was validated, as one from `git format-patch` without --thread, which has no Message-ID).
The summary is the answer and its sentence, the details the judged metrics in the 0-day
layout, the url the reply's text (reply.txt) as a file:// URL.
"""
import email
import email.policy
import email.utils
import json
import pathlib
import shlex
import sys
import tempfile

from krig.errors import KrigError, UsageError
from krig.record_validation import ValidationRecord, read_validation
from krig.results import VALIDATE_FILE, validations_dir

STATUS = {"fixed": "pass", "not fixed": "fail", "regressed": "fail",
          "inconclusive": "warn", "base does not reproduce": "warn"}
MAX_INPUT = 64 << 20          # a whole series, with room; b4 gives one message


def _ids(msg) -> set:
    """The Message-IDs a message names: its own, In-Reply-To and References, without <>."""
    out: set[str] = set()
    for field in ("Message-ID", "In-Reply-To", "References"):
        for value in msg.get_all(field) or []:
            out.update(i.strip("<> \t") for i in str(value).replace(">", "> ").split() if "@" in i)
    return out


def validations(dirs: list) -> list:
    """(directory, its ValidationRecord) of every validation under `dirs`."""
    out = []
    for d in dirs:
        for vfile in [pathlib.Path(d) / VALIDATE_FILE, *sorted(pathlib.Path(d).glob("*/" + VALIDATE_FILE))]:
            try:
                state = read_validation(vfile.parent, "--dir")
            except (OSError, UsageError):         # none here, one being written, or no validation's
                continue
            if state.kind == "krig-validate":
                out.append((vfile.parent, state))
    return out


def _patchset_hash(data: bytes) -> str | None:
    """The patchset hash of the patches in `data` as `krig validate` computes it, or None (no patch)."""
    from kernels.series import load_series
    with tempfile.TemporaryDirectory(prefix="krig-b4-check-") as td:
        f = pathlib.Path(td) / "stdin.mbox"
        f.write_bytes(data)
        try:
            return load_series(str(f), "standard input", log=lambda *a: None)["provenance"]["patchset_hash"]
        except KrigError:
            return None


def matching(data: bytes, found: list) -> list:
    msg = email.message_from_bytes(data, policy=email.policy.compat32)
    ids = _ids(msg)
    hits = [(d, s) for d, s in found if s.series_provenance.message_id in ids]
    if not hits and found and b"\n---" in data:
        phash = _patchset_hash(data)
        hits = [(d, s) for d, s in found if phash and s.series_provenance.patchset_hash == phash]
    return hits


def entry(vdir: pathlib.Path, state: ValidationRecord, others: int) -> dict:
    repro, answer = state.reproducer or "?", state.answer
    reply = vdir / "reply.txt"
    url = reply.resolve().as_uri() if reply.exists() else vdir.resolve().as_uri()
    if not answer:
        return {"tool": f"krig/{repro}", "status": "warn", "url": url, "details": "",
                "summary": f"validation not finished (started {state.created or '?'}): run the same "
                           f"`krig validate` again to finish it ({vdir})"}
    summary = f"{answer}: {state.reason or ''}"
    if others:
        summary += f" (the newest of {others + 1} validations with {repro})"
    return {"tool": f"krig/{repro}", "status": STATUS.get(answer, "warn"), "summary": summary,
            "url": url, "details": details(state)}


def details(state: ValidationRecord) -> str:
    from analysis.lkp import table_lines
    res = state.comparison
    rel = {side: k.release if k else None for side, k in (("base", state.base_kernel), ("new", state.new_kernel))}
    lines = [f"base:    {state.base or '?'}" + (f" ({rel['base']})" if rel["base"] else ""),
             "patched: the base + the series" + (f" ({rel['new']})" if rel["new"] else ""),
             f"rig:     {state.rig or '?'}, preset {state.preset or 'defaults'}"]
    if res:
        lines += [f"runs:    base {res.base.verdict_text}, patched {res.new.verdict_text}", ""]
        lines += table_lines(res, state.judged_metrics or None)
    lines += [f"differs: {d}" for d in state.differences or []]
    return "\n".join(lines)


def check(data: bytes, dirs: list) -> list:
    """b4's JSON list for the message (or messages) in `data`."""
    if not data.strip():
        raise UsageError("standard input: empty; b4 review gives the message to check on standard input")
    hits = matching(data, validations(dirs))
    if not hits:
        msg = email.message_from_bytes(data, policy=email.policy.compat32)
        mid = " ".join(str(msg.get("Message-ID") or "").split()) or "<MESSAGE-ID>"
        # a command to paste into a shell: the mail's Message-ID is quoted as one word, whatever it holds
        return [{"tool": "krig", "status": "warn", "url": "", "details": "",
                 "summary": "no krig validation of this series yet: krig validate REPRODUCER --base KERNEL "
                            f"--series {shlex.quote(mid)}"}]
    newest: dict[str | None, list] = {}       # by reproducer
    for vdir, state in hits:
        newest.setdefault(state.reproducer, []).append((state.finished or state.updated or "", vdir, state))
    out = []
    for repro in sorted(newest, key=str):
        runs = sorted(newest[repro], key=lambda t: t[0])
        _, vdir, state = runs[-1]
        out.append(entry(vdir, state, len(runs) - 1))
    return out


def main(dirs: list | None) -> int:
    dirs = dirs or [validations_dir()]
    for d in dirs:
        if not pathlib.Path(d).is_dir() and pathlib.Path(d) != validations_dir():
            what = "not a directory" if pathlib.Path(d).exists() else "no such directory"
            raise UsageError(f"--dir {d}: {what} (a directory of validations, as results/validate)")
    data = sys.stdin.buffer.read(MAX_INPUT + 1)
    if len(data) > MAX_INPUT:
        raise UsageError(f"standard input: more than {MAX_INPUT >> 20} MiB; b4 review gives one message")
    print(json.dumps(check(data, dirs), indent=1))
    return 0


def cmd_b4_check(a) -> int:
    """`krig b4-check [--dir DIR]...`."""
    return main(a.dir)
