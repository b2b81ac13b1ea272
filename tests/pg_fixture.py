"""A throwaway PostgreSQL cluster for a test: Debian's postgresql 15 (initdb, pg_ctl), owned by the
test, listening only on a unix socket in its own temporary directory (no TCP port), stopped and
removed after, on every path. Under root it runs as `nobody` (postgres refuses root)."""
import contextlib
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile

PG_BIN = pathlib.Path("/usr/lib/postgresql/15/bin")
USER = "nobody"


def _as_owner(argv: list) -> list:
    if os.geteuid() != 0:
        return argv
    pw = pwd.getpwnam(USER)
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--", *argv]


@contextlib.contextmanager
def postgres_cluster():
    """Yields the SQLAlchemy URL of a database on a fresh cluster."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="krig-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    owner = pwd.getpwnam(USER).pw_name if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        pw = pwd.getpwnam(USER)
        for p in (base, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    started = False
    try:
        subprocess.run(_as_owner([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", owner,
                                  "-E", "UTF8", "--no-sync"]), check=True, capture_output=True, env=env, timeout=120)
        opts = f"-k {sock} -c listen_addresses='' -c fsync=off -c max_connections=40"
        subprocess.run(_as_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(base / "log"),
                                  "-w", "-t", "60", "start"]), check=True, capture_output=True, env=env, timeout=90)
        started = True
        subprocess.run(_as_owner([str(PG_BIN / "createdb"), "-h", str(sock), "-U", owner, "krig"]),
                       check=True, capture_output=True, env=env, timeout=60)
        yield f"postgresql+psycopg://{owner}@/krig?host={sock}"
    finally:
        if started:
            subprocess.run(_as_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "60",
                                      "stop"]), capture_output=True, env=env, timeout=90)
        shutil.rmtree(base, ignore_errors=True)


def postmaster_pid(url: str) -> int | None:
    """The cluster's postmaster pid (its data directory's postmaster.pid), None when it is stopped."""
    sock = pathlib.Path(url.split("host=")[1])
    pidfile = sock.parent / "data" / "postmaster.pid"
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running(pid: int) -> bool:
    """Whether process pid runs (a zombie, dead and waiting for its parent to reap it, does not)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except OSError:
        return False
