"""The results history: every run, as it ends, indexed in one store (SQLite beside the results, or
a shared lab's PostgreSQL), and the questions a person asks of it (docs/history.md).

    store       the store: its URL (KRIG_HISTORY_URL), its schema (SQLAlchemy Core tables), its
                Alembic migrations applied in place, and its writes
    rows        a run directory, read through krig/record.py, as the store's rows
    remember    what workflows/run.py calls when a run ends, and `krig history import`
    query       the questions: runs listed, a metric's trend, regressions, flaky results, server health
    health      server health as `krig qualify` and `krig lab status` ask it
    commands    `krig history ...`'s handlers; html the dashboard; plot its pictures
"""
