"""The history store: where it is, its tables (SQLAlchemy Core), its schema brought to this krig's
revision in place (Alembic, migrations/versions/), and a run's rows written.

Where: KRIG_HISTORY_URL, a SQLAlchemy URL (sqlite:////path/history.sqlite,
postgresql+psycopg://user@host/db or postgresql+psycopg:///db?host=/socket/dir for a shared lab), or
`off`; without it, SQLite at <results root>/history.sqlite (the results root: $KRIG_RESULTS, default
results/), so the history moves with the results it indexes. A SQLite store waits
KRIG_HISTORY_TIMEOUT seconds (default 10) for another writer's lock.

The run directory stays the source of truth: a row points back to it (runs.run_dir), and writing a
run again (krig history import) replaces its rows, so an import is idempotent.
"""
import contextlib
import fcntl
import os
import pathlib
import time

import sqlalchemy as sa

from krig import RESULTS_DIR
from krig.errors import UsageError

HISTORY_FILE = "history.sqlite"
URL_ENV, TIMEOUT_ENV = "KRIG_HISTORY_URL", "KRIG_HISTORY_TIMEOUT"
MIGRATIONS = pathlib.Path(__file__).resolve().parent / "migrations"
_LOCK_KEY = 0x6b726967      # PostgreSQL's advisory lock held while the schema is upgraded ("krig")

meta = sa.MetaData()
runs = sa.Table(
    "runs", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_dir", sa.Text, nullable=False, unique=True),
    sa.Column("workflow", sa.String(32), nullable=False),
    *(sa.Column(n, sa.String(200)) for n in ("reproducer", "preset")), sa.Column("params", sa.Text),
    sa.Column("kernel", sa.String(200)), sa.Column("kernel_release", sa.String(200)),
    sa.Column("kernel_commit", sa.String(64)), sa.Column("kernel_config", sa.String(64)),
    sa.Column("series", sa.Text), sa.Column("patchset_hash", sa.String(128)),
    sa.Column("rig", sa.String(200)), sa.Column("driver", sa.String(64)),
    sa.Column("server_model", sa.String(200)), sa.Column("server_firmware", sa.Text),
    sa.Column("ram_bytes", sa.BigInteger), sa.Column("cpus", sa.Integer), sa.Column("numa_nodes", sa.Integer),
    sa.Column("verdict", sa.String(32)), sa.Column("cause", sa.String(64)), sa.Column("reason", sa.Text),
    sa.Column("started", sa.String(40)), sa.Column("ended", sa.String(40)),
    sa.Column("host_load", sa.String(64)), sa.Column("controller", sa.String(200)),
    sa.Column("sku", sa.String(200)),
)
metrics = sa.Table(
    "metrics", meta,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("value", sa.Float), sa.Column("unit", sa.String(64)),
)
thresholds = sa.Table(
    "thresholds", meta,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("name", sa.String(300), primary_key=True),
    sa.Column("outcome", sa.String(32)), sa.Column("limit_text", sa.Text),
)


class HistoryError(UsageError):
    """The store cannot be used as it is (newer than this krig, a bad URL): one line."""


def store_url() -> str | None:
    """The store's URL (KRIG_HISTORY_URL, or SQLite beside the results); None when it is `off`."""
    url = os.environ.get(URL_ENV, "").strip()
    if url.lower() == "off":
        return None
    return url or f"sqlite:///{RESULTS_DIR / HISTORY_FILE}"


def public(url: str) -> str:
    """The URL as said in a line: its password never."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(a URL SQLAlchemy does not read)"


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "10")
    try:
        return max(0.1, float(raw))
    except ValueError:
        raise UsageError(f"{TIMEOUT_ENV}={raw!r}: use a number of seconds, e.g. 10") from None


_engines: dict = {}


def engine(url: str) -> sa.engine.Engine:
    """The engine of `url`, made once a process, its schema at this krig's head revision."""
    if url not in _engines:
        try:
            parsed = sa.engine.make_url(url)
        except sa.exc.ArgumentError:
            raise HistoryError(f"{URL_ENV}: {url!r} is not a database URL; use sqlite:///PATH or "
                               "postgresql+psycopg://USER@HOST/DB (or `off`)") from None
        if parsed.get_backend_name() == "sqlite":
            if parsed.database:
                pathlib.Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            eng = sa.create_engine(parsed, connect_args={"timeout": _timeout()})
            sa.event.listen(eng, "connect", _sqlite_pragmas)
        elif parsed.get_backend_name() == "postgresql":
            eng = sa.create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": int(_timeout())})
        else:
            raise HistoryError(f"{URL_ENV}: {parsed.get_backend_name()!r} is not a store krig keeps a history in; "
                               "use sqlite or postgresql")
        upgrade(eng)
        _engines[url] = eng
    return _engines[url]


def _sqlite_pragmas(dbapi_conn, _record):
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")      # readers never wait for the writer (qualify's workers)
    cur.close()


def _script():
    from alembic.script import ScriptDirectory
    from alembic.config import Config
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg, ScriptDirectory.from_config(cfg)


def revision_of(conn) -> str | None:
    """The store's schema revision (Alembic's version table), None for an empty store."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@contextlib.contextmanager
def _sqlite_upgrade_lock(eng):
    """Two processes opening a new SQLite store at once upgrade it once: a lock file beside it
    (SQLite's driver begins no transaction around DDL for a lock of its own to hold)."""
    db = eng.url.database if eng.dialect.name == "sqlite" else None
    if not db or db == ":memory:":
        yield
        return
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        deadline = time.monotonic() + _timeout()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HistoryError(f"history store {db}: another krig is upgrading its schema "
                                       f"(waited {_timeout():g} s, {TIMEOUT_ENV})") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def upgrade(eng, to: str = "head") -> None:
    """The store's schema brought to revision `to` in place (a store newer than krig: one line)."""
    with _sqlite_upgrade_lock(eng):
        _upgrade(eng, to)


def _upgrade(eng, to: str) -> None:
    from alembic import command
    cfg, script = _script()
    head = script.get_current_head()
    with eng.begin() as conn:
        if conn.dialect.name == "postgresql":       # two controllers starting at once upgrade once
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        have = revision_of(conn)
        if have is not None and have not in {r.revision for r in script.walk_revisions()}:
            raise HistoryError(f"history store {public(str(eng.url))} is at schema revision {have}, newer than this "
                               f"krig's ({head}): upgrade krig to use it")
        if have == (head if to == "head" else to):
            return
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, to)


def write_runs(eng, batch: list) -> None:
    """Runs' rows, each (row, metric rows, threshold rows), in one transaction, each replacing what
    the store had of the same run directory."""
    if not batch:
        return
    with eng.begin() as conn:
        old = list(conn.execute(sa.select(runs.c.id).where(runs.c.run_dir.in_([r["run_dir"] for r, _m, _t in batch])))
                   .scalars())
        if old:
            conn.execute(sa.delete(metrics).where(metrics.c.run_id.in_(old)))
            conn.execute(sa.delete(thresholds).where(thresholds.c.run_id.in_(old)))
            conn.execute(sa.delete(runs).where(runs.c.id.in_(old)))
        ids = conn.execute(sa.insert(runs).returning(runs.c.id, sort_by_parameter_order=True),
                           [row for row, _m, _t in batch]).scalars().all()
        metric_rows = [{**m, "run_id": i} for i, (_r, ms, _t) in zip(ids, batch) for m in ms]
        threshold_rows = [{**t, "run_id": i} for i, (_r, _m, ts) in zip(ids, batch) for t in ts]
        if metric_rows:
            conn.execute(sa.insert(metrics), metric_rows)
        if threshold_rows:
            conn.execute(sa.insert(thresholds), threshold_rows)


def known_dirs(eng) -> set:
    with eng.connect() as conn:
        return set(conn.execute(sa.select(runs.c.run_dir)).scalars())
