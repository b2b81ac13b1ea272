"""git, asked the way krig asks it: without the caller's GIT_DIR & co., one line when it fails;
and a tree's origin as a record names it (kernels built from a git tree, a given built tree)."""
import os
import pathlib
import subprocess

from krig.errors import KrigError
from krig.results import public_repository


def git_env() -> dict:
    """The environment minus GIT_DIR & co. (`git bisect run` exports them to its command)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git(repo, *args, check=True) -> str:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=git_env())
    if check and p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or ["failed"])[-1]
        raise KrigError(f"git -C {repo} {' '.join(args)}: {msg}")
    return p.stdout.strip()


def git_origin(tree: pathlib.Path, ref: str = "HEAD") -> dict | None:
    """{"repository", "commit", "branch"} of tree at ref; None when it is no git tree or ref no commit."""
    if not ((tree / ".git").exists() or (tree / "HEAD").exists()):
        return None
    try:
        commit = git(tree, "rev-parse", "--verify", f"{ref}^{{commit}}")
    except KrigError:
        return None
    full = git(tree, "rev-parse", "--symbolic-full-name", ref, check=False)
    branch = full[len("refs/heads/"):] if full.startswith("refs/heads/") else None
    # named by its origin (no credentials, no query string) or its directory's last name, never
    # by a path of this host: the record goes into bundles, replies and KCIDB reports
    remote = git(tree, "config", "--get", "remote.origin.url", check=False)
    return {"repository": public_repository(remote) if remote else tree.name, "commit": commit, "branch": branch}
