"""Where results go, decided here and nowhere else, all under the results root ($KRIG_RESULTS,
default results/; a caller's -o/--dir wins):

    <reproducer>/<kernel-id>/<rig>/<UTC time>/          a run (krig run)
    <reproducer>/<kernel-id>/<rig>/group-<UTC time>/    a group of runs (krig run --repeat)
        group-<UTC time>/run-01/, run-02/, ...          a group's runs
    validate/<reproducer>-<patchset hash>-<key>/        a validation (krig validate; b4-check reads them)
        validate.json, base/, new/                      its answer, and a group of runs a side
    compare/<reproducer>-<UTC time>/                    krig compare's pictures
    bisect/<reproducer>-<UTC time>-<pid>/               a bisection's log and state
        bisect.log, state.json, git-bisect-log.txt
        kernels/bisect-<id>*.toml                       the kernels it built (never in the checkout)
    qualify/<suite name>/                               a qualification (krig qualify)
        suite.json, cases/<case id>.json, runs/         its record, each finished case's, the runs
    ./krig-bundle-<reproducer>-<UTC time>.tar.gz        a bundle (krig bundle, in the working directory)
    latest -> the newest run
"""
import datetime
import os
import pathlib
import re
from collections.abc import Iterable
from typing import Any, TypeVar, overload

from . import RESULTS_DIR, safeio
from .errors import KrigError, UsageError
from .paths import owner_alive
from .rundir import Run, RunDir

T = TypeVar("T")
Root = str | os.PathLike[str] | None       # a results directory; None: RESULTS_DIR

GROUP_FILE = "group.json"      # a group directory's record (krig run --repeat, workflows/group.py)
GROUP_RUN = "run-"              # a group's runs: run-01, run-02, ...
VALIDATE_FILE = "validate.json"  # a validation directory's record (krig validate, krig b4-check)
VALIDATE_SIDES = ("base", "new")  # a validation's two groups of runs: the base kernel, the patched one
BISECT_LOG = "bisect.log"       # a bisection's steps, one a line
BISECT_STATE = "state.json"     # what each step's oracle reads
BISECT_GIT_LOG = "git-bisect-log.txt"
BISECT_KERNELS = "kernels"      # the kernel tomls a bisection generates and builds (kernels.definition.GENERATED_DIRS)
SUITE_FILE = "suite.json"       # a qualification directory's record (krig qualify, krig export kcidb)
QUALIFY_CASES = "cases"         # its finished cases' records, <case id>.json (what a rerun skips)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")
_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?#\"'<>]*)\?[^\s#\"'<>]*")
_FRAGMENT = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s#\"'<>]*)#[^\s\"'<>]*")
# scp's [USER@]HOST:PATH (no scheme): USER is group 1, HOST: group 2, PATH's end a #fragment (group 3)
_SCP = re.compile(r"(?i)(?<![^\s\"'(<,\[])(?:([^\s\"'<>()\[\],/]+)@)?([a-z0-9][a-z0-9.-]*:)(?!//)"
                  r"([^\s\"'<>#]+)(#[^\s\"'<>]*)?")
SSH_USERS = {"git"}  # the conventional user of a git host's ssh (git@github.com:org/repo): no secret
# an absolute path not inside a URL or a word: its last component is group 1
_ABS_PATH = re.compile(r"(?<![\w.~:/@-])/(?:[^\s/'\"]+/)*([^\s/'\"]+)/?")


@overload
def public_url(text: str) -> str: ...
@overload
def public_url(text: T) -> T: ...
def public_url(text: object) -> object:
    """`text` with the user name and password taken out of every URL in it
    (https://user:TOKEN@host/linux.git -> https://host/linux.git), and the query string and
    fragment too (https://host/linux.git?access_token=T or #T -> https://host/linux.git); in
    scp's form, a user other than the conventional git (TOKEN@host:org/linux.git ->
    host:org/linux.git; git@host:org/linux.git stays) and the fragment. A tree's origin URL is
    recorded through this, and read through it again from older manifests, before it goes
    into a manifest, a bundle, a reply or a KCIDB report. Anything but a string is returned as is."""
    if not isinstance(text, str):
        return text
    text = _FRAGMENT.sub(r"\1", _QUERY.sub(r"\1", _USERINFO.sub(r"\1", text)))
    return _SCP.sub(_scp_public, text)


def _scp_public(m: re.Match[str]) -> str:
    user, host, path = m.group(1), m.group(2), m.group(3)
    if user is None and m.group(4) is None:
        return m.group(0)
    return (f"{user}@" if user in SSH_USERS else "") + host + path


def is_url(value: str) -> bool:
    """Whether a tree's name is somewhere else than this host: a URL (scheme://, file: excluded)
    or scp's host:path; a path on this host is not."""
    v = value.strip()
    if not v or v.lower().startswith("file:"):
        return False
    return bool(re.match(r"(?i)^[a-z][a-z0-9+.-]*://\S", v) or re.match(r"^[^/\s]+:", v))


@overload
def public_repository(value: str) -> str: ...
@overload
def public_repository(value: T) -> T: ...
def public_repository(value: object) -> object:
    """A tree's name fit to leave the host: its URL through public_url, or, for a path on this
    host (/home/alice/src/linux, file:///srv/linux.git), the directory's last name (linux,
    linux.git). Anything but a string is returned as is."""
    if not isinstance(value, str) or not value.strip():
        return value
    v = value.strip()
    if v.lower().startswith("file:"):
        v = v[len("file:"):].lstrip("/") or "."
    elif is_url(v):
        return public_url(v)
    return pathlib.PurePosixPath(v.rstrip("/")).name or "."


@overload
def public_paths(text: str) -> str: ...
@overload
def public_paths(text: T) -> T: ...
def public_paths(text: object) -> object:
    """`text` (a kernel's description) with every absolute path on this host replaced by its last
    name ("built tree /home/alice/src/linux" -> "built tree linux"); URLs are left to public_url."""
    return _ABS_PATH.sub(r"\1", public_url(text)) if isinstance(text, str) else text


def stamp() -> str:
    """The UTC time in a result's name: 20261126T044500Z."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def _root(root: Root) -> pathlib.Path:
    return pathlib.Path(root) if root is not None else RESULTS_DIR


def group_dir(root: Root, repro: str, kernel_id: str, rig: str) -> pathlib.Path:
    return _root(root) / repro / kernel_id / rig / f"group-{stamp()}"


def validations_dir(root: Root = None) -> pathlib.Path:
    return _root(root) / "validate"


def validation_dir(repro: str, patchset_hash: str, key: str, root: Root = None) -> pathlib.Path:
    return validations_dir(root) / f"{repro}-{patchset_hash[:12]}-{key}"


def compare_dir(repro: str, root: Root = None) -> pathlib.Path:
    return _root(root) / "compare" / f"{repro}-{stamp()}"


def bisect_tag() -> str:
    """A bisection's name (its log directory and its generated kernel toml): time and pid."""
    return f"{stamp()}-{os.getpid()}"


def bisect_dir(repro: str, tag: str, root: Root = None) -> pathlib.Path:
    return _root(root) / "bisect" / f"{repro}-{tag}"


def qualify_dir(suite_name: str, root: Root = None) -> pathlib.Path:
    return _root(root) / "qualify" / suite_name


def bundle_name(repro: str) -> str:
    """A bundle's top directory, and its file name with .tar.gz."""
    return f"krig-bundle-{repro}-{stamp()}"


def new_run_dir(root: pathlib.Path, repro: str, kernel_id: str, rig: str) -> pathlib.Path:
    stamp_ = stamp()
    base = root / repro / kernel_id / rig
    base.mkdir(parents=True, exist_ok=True)
    for i in range(1000):
        d = base / (stamp_ if i == 0 else f"{stamp_}-{i}")
        try:
            d.mkdir()
        except FileExistsError:
            continue
        _point_latest(root, d)
        return d
    raise RuntimeError(f"cannot create a run directory under {base}")


def claim_run_dir(root: pathlib.Path, d: pathlib.Path) -> pathlib.Path:
    """A run directory chosen by the caller (a group's run-NN): made here, must be new."""
    d.mkdir(parents=True)
    _point_latest(root, d)
    return d


def _point_latest(root: pathlib.Path, d: pathlib.Path) -> None:
    latest = root / "latest"
    tmp = root / f".latest.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(os.path.relpath(d, root))
        tmp.replace(latest)
    except OSError:
        pass


def write_json(path: pathlib.Path, data: Any) -> None:
    """Write path atomically: its directory is krig's, the name is never written through (krig/safeio.py)."""
    safeio.write_json(*safeio.split(path), data)


def read_record(d: pathlib.Path, name: str, what: str) -> dict[str, Any]:
    """The JSON object of directory d's record file `name`; an unreadable one or one that is not a
    JSON object is one line naming `what` (the option or argument that gave the directory)."""
    try:
        data = read_json(pathlib.Path(d) / name)
    except UsageError as e:
        said = str(e).partition(f"{name}: ")[2] or str(e)        # what is wrong, without the path
        raise UsageError(f"{what} {d}: {name}: {said}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {d}: {name} is not a JSON object")
    return data


def read_json(path: pathlib.Path) -> Any:
    """A JSON file of krig's own records (group.json, validate.json, ...) read safely."""
    return safeio.read_json(*safeio.split(path))


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def run_state(d: Run) -> str:
    """The verdict of a run directory (a path or its RunDir), 'RUNNING' if its krig still runs,
    'INCOMPLETE' without one."""
    try:
        run = RunDir.of(d)
    except (OSError, KrigError):
        return "INCOMPLETE"
    from .record import RunRecord, read_verdict      # b4-check imports this module and reads no run
    try:
        judged = read_verdict(run)
        v = judged.verdict if judged else None
    except (OSError, KrigError):
        v = None
    if v and isinstance(v, str) and v != "INCOMPLETE":
        return v
    try:
        man = RunRecord.read(run).manifest
    except (OSError, KrigError):
        return "INCOMPLETE"
    if not man.ended and owner_alive(man.owner):
        return "RUNNING"
    return "INCOMPLETE"


def run_dirs_of(gdir: pathlib.Path) -> list[pathlib.Path]:
    """A group's run directories (run-NN), in order."""
    return sorted(p for p in gdir.glob(GROUP_RUN + "*") if p.is_dir())


def next_group_run(gdir: pathlib.Path, dirs: Iterable[str | os.PathLike[str]]) -> pathlib.Path:
    """A group's next run directory: run-NN one past the highest number among `dirs` (run-01 first)."""
    used = [int(n) for d in dirs if (n := pathlib.Path(d).name.removeprefix(GROUP_RUN)).isdigit()]
    return gdir / f"{GROUP_RUN}{max(used, default=0) + 1:02d}"


def validation_side(vdir: pathlib.Path, side: str) -> pathlib.Path:
    """One side's group of runs in a validation directory (side: one of VALIDATE_SIDES)."""
    if side not in VALIDATE_SIDES:
        raise ValueError(f"a validation has no side {side!r}")
    return vdir / side
