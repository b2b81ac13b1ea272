"""A patch series as a developer has it: an mbox (what `git format-patch --cover-letter`,
`b4 am` or a list archive's thread download gives, `.gz` too) or a directory of patches.

The series is read with `b4 am -m FILE` in offline mode: b4 is what maintainers use
to turn a list thread into a series, so it picks the newest revision of a thread,
puts the patches in order, keeps replies out of the patches and collects the
trailers (`Tested-by:`, ...) sent to them. Its output is split into one file per
patch (`git mailsplit`), stored under $KRIG_CACHE/series/<patchset hash>/ and applied
by krig's build like every patch series (`patch -p1`, kernels/incremental.py), onto
a git tree at a commit or onto Debian's linux-source alike, without checking out or
touching the developer's tree. A series without any Message-ID (format-patch
without --thread) is split in file order with `git mailsplit` alone.

A series may also be named by its Message-ID (`<id@host>`, `id@host`, or a list
archive URL ending in one, as lore's https://lore.kernel.org/r/<id>/): the thread is
fetched once with `b4 mbox` from the archive b4 is configured for (`b4.midmask` in
git config, lore.kernel.org by default), kept under $KRIG_CACHE/series/threads/, and
read like a file. The Message-ID, not a local path, is then what validate.json and the
reply's command name, so the command works on anyone's machine.

Provenance (recorded in manifest.json "series", group.json and bundles): the
Message-ID of the cover letter (else of the first patch), its subject without the
[PATCH x/y] prefix, its author, the base commit (`base-commit:`), KCIDB's
patchset_hash: sha256 over the newline-terminated sha256 of each patch, in order,
and cc: the lists and people that message went to (To, Cc, List-Post), whom the
reply copies.
"""
import email
import email.policy
import email.utils
import gzip
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

from krig.errors import KrigError, UsageError
from krig.paths import cache_dir

B4 = pathlib.Path(sys.executable).with_name("b4")
_PREFIX = re.compile(r"^\s*(?:re:\s*)?(?:\[[^\]]*\]\s*)+", re.I)
_BASE = re.compile(r"^base-commit:\s*([0-9a-f]{7,40})\s*$", re.M)
_DIFF = re.compile(rb"^(?:diff --git |--- a/|\+\+\+ b/)", re.M)
_MSGID_URL = re.compile(r"^https?://[^/\s]+/(?:\S+/)?(?P<id>[^/\s]+@[^/\s]+?)(?:/(?:t\.mbox\.gz|raw|t|T)?)?/?(?:[?#]\S*)?$")
_MSGID = re.compile(r"^<?(?P<id>[^<>\s@/]+@[^<>\s/]+?)>?$")


def message_id_of(text: str) -> str | None:
    """The Message-ID `text` names when it is not a file or directory here: `<id@host>`,
    `id@host`, or a list archive URL ending in one (lore's .../r/<id>/, .../<list>/<id>/t.mbox.gz)."""
    t = str(text).strip()
    if pathlib.Path(t).expanduser().exists():
        return None
    m = _MSGID_URL.match(t) or _MSGID.match(t)
    return urllib.parse.unquote(m.group("id")) if m else None


def series_source(text) -> str:
    """What a --series argument names, as recorded: its Message-ID, else the resolved path."""
    return message_id_of(str(text)) or str(pathlib.Path(text).expanduser().resolve())


def fetch_thread(msgid: str, what: str = "--series", log=print) -> pathlib.Path:
    """The thread of `msgid` as an mbox, fetched with `b4 mbox` once and kept (a validation
    resumed or repeated reads the same thread)."""
    store = cache_dir("series", "threads")
    kept = store / f"{hashlib.sha256(msgid.encode()).hexdigest()[:16]}.mbox"
    if kept.exists():
        log(f"krig: series {msgid}: the thread fetched before ({kept})")
        return kept
    with tempfile.TemporaryDirectory(prefix="krig-thread-") as td:
        p = _run([_b4(), "--no-stdin", "mbox", "-o", td, "-n", "thread.mbox", msgid], cwd=td)
        got = [f for f in pathlib.Path(td).iterdir() if f.is_file() and f.stat().st_size]
        if p.returncode != 0 or not got:
            out = (p.stdout + p.stderr).decode(errors="replace").strip().splitlines()
            last = [ln.strip() for ln in out if ln.strip() and not ln.startswith(("Looking up", "Grabbing"))][-1:]
            raise UsageError(f"{what} {msgid}: b4 could not fetch the thread ({(last or ['no output'])[0][:200]}); "
                             f"b4 fetches from its b4.midmask (git config; lore.kernel.org by default)")
        tmp = kept.with_name(kept.name + f".tmp{os.getpid()}")
        shutil.copyfile(got[0], tmp)
        tmp.rename(kept)
    log(f"krig: series {msgid}: thread fetched with b4 mbox -> {kept}")
    return kept


def read_input(path: pathlib.Path, what: str = "--series") -> bytes:
    """The series as one mbox: a file (.gz read), or a directory's *.patch / *.mbox / *.eml in name order."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".patch", ".mbox", ".mbx", ".eml", ".gz"))
        if not files:
            raise UsageError(f"{what} {path}: no *.patch, *.mbox or *.eml files in the directory")
        return b"".join(_read_one(p, what) for p in files)
    if not path.is_file():
        raise UsageError(f"{what} {path}: no such file or directory (an mbox, .mbox.gz, or a directory of patches)")
    return _read_one(path, what)


def _read_one(p: pathlib.Path, what: str) -> bytes:
    try:
        data = p.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise UsageError(f"{what} {p}: cannot read it ({e})") from None
    if not data.startswith(b"From "):     # a single mail saved without the mbox separator
        data = b"From krig@z Thu Jan  1 00:00:00 1970\n" + data
    return data if data.endswith(b"\n") else data + b"\n"


def _messages(mbox: bytes) -> list:
    parts = re.split(rb"^(?=From \S+ .*\d{4}\s*$)", mbox, flags=re.M)
    out = []
    for part in parts:
        if part.strip():
            body = part.split(b"\n", 1)[1] if part.startswith(b"From ") else part
            out.append(email.message_from_bytes(body, policy=email.policy.compat32))
    return out


def subject_of(msg) -> str:
    s = " ".join(str(msg.get("Subject", "")).split())
    return _PREFIX.sub("", s).strip() or s


def recipients(msg, author: str | None) -> list:
    """Who a reply to the series goes to besides its author: the addresses in the To and Cc of
    the series' first message (the lists and people it was sent to), and the list it came
    through (List-Post: <mailto:...>, which a list archive's copy keeps), each once."""
    out, seen = [], {email.utils.parseaddr(author or "")[1].lower()}
    posted = re.findall(r"<mailto:([^>?\s]+)", str(msg.get("List-Post", "")))
    pairs = email.utils.getaddresses([str(v) for k in ("To", "Cc") for v in msg.get_all(k, [])])
    for name, addr in pairs + [("", a) for a in posted]:
        if "@" in addr and addr.lower() not in seen:
            seen.add(addr.lower())
            out.append(email.utils.formataddr((name, addr)))
    return out


def _run(argv, cwd=None, input=None) -> subprocess.CompletedProcess:
    # no GIT_DIR & co. (git bisect run exports them), but the user's git config settings (b4's too)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith("GIT_CONFIG")}
    env.setdefault("HOME", str(pathlib.Path.home()))
    return subprocess.run(argv, cwd=cwd, input=input, capture_output=True, env=env, timeout=300)


def _split(mbx: pathlib.Path, outdir: pathlib.Path) -> list:
    outdir.mkdir(parents=True, exist_ok=True)
    p = _run(["git", "mailsplit", "-d4", f"-o{outdir}", str(mbx)])
    if p.returncode != 0:
        raise UsageError(f"{mbx}: git mailsplit failed: {p.stderr.decode(errors='replace').strip()[:200]}")
    return sorted(outdir.iterdir())


def _b4() -> str:
    if not B4.exists() and not shutil.which("b4"):
        raise KrigError("b4 is not installed in krig's environment (run `make setup`)")
    return str(B4) if B4.exists() else "b4"


def _b4_am(mbox: pathlib.Path, work: pathlib.Path, label: str) -> tuple[pathlib.Path, pathlib.Path | None]:
    """b4 am -m in offline mode -> (the am-ready mbox, the cover letter or None)."""
    p = _run([_b4(), "--offline-mode", "--no-stdin", "am", "-m", str(mbox), "-o", str(work), "-n", "series"],
             cwd=work)
    mbx = work / "series.mbx"
    if p.returncode != 0 or not mbx.exists():
        out = (p.stdout + p.stderr).decode(errors="replace").strip().splitlines()
        last = [ln for ln in out if ln.strip() and not ln.startswith("Running")][-1:] or ["no output"]
        raise UsageError(f"--series {label}: b4 am found no patch series in it ({last[0].strip()[:200]})")
    cover = work / "series.cover"
    return mbx, cover if cover.exists() else None


def patchset_hash(patches: list) -> str:
    """KCIDB's patchset_hash: sha256 of the newline-terminated sha256 hex digests of each patch, in order."""
    return hashlib.sha256("".join(hashlib.sha256(p.read_bytes()).hexdigest() + "\n"
                                  for p in patches).encode()).hexdigest()


def load_series(path, what: str = "--series", log=print) -> dict:
    """Read a series -> {"provenance": {...}, "patches": [paths in apply order], "source": path}.

    `path` may be a Message-ID (fetch_thread). The patches are stored in
    $KRIG_CACHE/series/<patchset hash[:16]>/ (stable, by content)."""
    source = series_source(path)
    named = None if source.startswith("/") else source      # a resolved path is absolute; a Message-ID is not
    path = fetch_thread(named, what, log) if named else pathlib.Path(source)
    label = named or path.name
    data = read_input(path, what)
    msgs = _messages(data)
    if not any(_DIFF.search(m.as_bytes()) for m in msgs):
        raise UsageError(f"{what} {named or path}: no patch in it (no 'diff --git' or '--- a/' lines)")
    with tempfile.TemporaryDirectory(prefix="krig-series-") as tdir:
        td = pathlib.Path(tdir)
        (td / "in.mbox").write_bytes(data)
        if any(m.get("Message-ID") for m in msgs):
            mbx, cover_path = _b4_am(td / "in.mbox", td, named or str(path))
            applied_by = "b4 am -m (offline)"
        else:
            mbx, cover_path = td / "in.mbox", None
            applied_by = "git mailsplit (no Message-ID: file order)"
        split = _split(mbx, td / "split")
        split = [p for p in split if _DIFF.search(p.read_bytes())]
        cover = None
        if cover_path is not None:
            cover = email.message_from_bytes(cover_path.read_bytes(), policy=email.policy.compat32)
        else:
            cover = next((m for m in msgs if not _DIFF.search(m.as_bytes())
                          and re.search(r"\b0+/\d+\]", str(m.get("Subject", "")))), None)
        first = email.message_from_bytes(split[0].read_bytes(), policy=email.policy.compat32)
        head = cover if cover is not None and cover.get("Message-ID") else first
        texts = [m.as_string() for m in ([cover] if cover is not None else []) + msgs]
        base = next((m.group(1) for t in texts for m in [_BASE.search(t)] if m), None)
        phash = patchset_hash(split)
        store = cache_dir("series") / phash[:16]
        if not (store / "series.json").exists():
            tmp = store.with_name(store.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            names = []
            for i, p in enumerate(split, 1):
                msg = email.message_from_bytes(p.read_bytes(), policy=email.policy.compat32)
                slug = re.sub(r"[^A-Za-z0-9]+", "-", subject_of(msg)).strip("-")[:52] or "patch"
                names.append(f"{i:04d}-{slug}.patch")
                shutil.copyfile(p, tmp / names[-1])
            (tmp / "series.json").write_text(json.dumps({"patches": names}, indent=1) + "\n")
            shutil.rmtree(store, ignore_errors=True)
            tmp.rename(store)
    names = json.loads((store / "series.json").read_text())["patches"]
    patches = [store / n for n in names]
    msgid = (head.get("Message-ID") or "").strip().strip("<>") or None
    subject = subject_of(cover if cover is not None else first)
    author = str(head.get("From", "")).strip() or None
    sent = next((m for m in msgs if msgid and (m.get("Message-ID") or "").strip().strip("<>") == msgid), head)
    prov = {"message_id": msgid, "subject": subject, "author": author, "base_commit": base,
            "patchset_hash": phash, "cc": recipients(sent, author)}
    log(f"krig: series {label}: {len(patches)} patch(es) via {applied_by}: {subject!r} "
        f"(patchset {phash[:12]})")
    return {"provenance": prov, "patches": patches, "source": source, "applied_by": applied_by,
            "reply_subject": " ".join(str((cover if cover is not None else first).get("Subject", "")).split()),
            "patch_subjects": [subject_of(email.message_from_bytes(p.read_bytes(), policy=email.policy.compat32))
                               for p in patches]}
