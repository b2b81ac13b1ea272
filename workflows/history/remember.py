"""A run written to the history: when it ends (workflows/run.py calls remember), and afterwards
(`krig history import DIR`, which walks DIR for run directories and catches the store up).

A store that does not answer, is full or is locked never costs a run: remember says so in one
line ("history not updated: ...") and the run directory, the source of truth, is as it was;
`krig history import` writes it later.
"""
import os
import pathlib

from krig.errors import KrigError
from krig.rundir import is_run_dir

IMPORT_BATCH = 500          # runs a transaction when importing
WALK_CAP = 1_000_000        # directories looked at by one import, at most


def remember(run_dir, workflow: str | None = None, log=print) -> bool:
    """Write one run to the history; False (and one line said) when the store did not take it."""
    try:
        from . import rows, store
        url = store.store_url()
        if url is None:
            return False
        store.write_runs(store.engine(url), [rows.run_rows(run_dir, workflow)])
        return True
    except Exception as e:      # noqa: BLE001 - whatever the store or its driver raised, the run stands
        log(f"history not updated: {said(e)} (the run is in {run_dir}; `krig history import` catches up)")
        return False


def said(e: Exception) -> str:
    """One line of what went wrong: a database's own message without its statement or parameters."""
    orig = getattr(e, "orig", None)
    text = str(orig if orig is not None else e).strip().splitlines()
    return f"{type(orig or e).__name__}: {text[0] if text else 'no message'}"


def run_dirs_under(top: pathlib.Path):
    """The run directories under `top` (itself included), no link followed, not below a run."""
    seen = 0
    for dirpath, dirnames, _files in os.walk(top, followlinks=False):
        seen += 1
        if seen > WALK_CAP:
            raise KrigError(f"{top}: more than {WALK_CAP} directories; import a part of it at a time")
        if is_run_dir(dirpath):
            dirnames[:] = []
            yield pathlib.Path(dirpath)
        else:
            dirnames.sort()


def import_dirs(tops, eng, log=print) -> tuple[int, list]:
    """Every run directory under `tops` written to the store: (runs written, [refusal lines])."""
    from . import rows, store
    done, refused, batch = 0, [], []
    for top in tops:
        for d in run_dirs_under(pathlib.Path(top)):
            try:
                batch.append(rows.run_rows(d))
            except (KrigError, OSError, ValueError) as e:
                refused.append(f"{d}: {e}".replace(f"{d}: {d}", str(d)))
                continue
            if len(batch) >= IMPORT_BATCH:
                store.write_runs(eng, batch)
                done, batch = done + len(batch), []
    if batch:
        store.write_runs(eng, batch)
        done += len(batch)
    return done, refused
