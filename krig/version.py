"""krig's version and the git commit of the checkout it runs from (`krig --version`, the
manifests, the reply's signature). Standard library only: `krig --version` imports nothing else."""
import pathlib
import subprocess
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def version() -> str:
    """The version in the checkout's pyproject.toml, else the installed package's."""
    try:
        return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        import importlib.metadata        # ~20 ms: only for an installed krig without its checkout
        try:
            return importlib.metadata.version("krig")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"


def git_revision() -> str:
    """The checkout's commit, `-dirty` when tracked files changed; "unknown" outside git."""
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev or "unknown") + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def version_line() -> str:
    """`krig 0.1.0 (commit 6f7b243...)`, or `krig 0.1.0` when the code is not a git checkout."""
    rev = git_revision() if (ROOT / ".git").exists() else "unknown"
    return f"krig {version()}" + ("" if rev == "unknown" else f" (commit {rev})")


def origin() -> str | None:
    """The URL the checkout was cloned from (remote.origin.url), None without one."""
    if not (ROOT / ".git").exists():
        return None
    try:
        url = subprocess.run(["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return url or None
