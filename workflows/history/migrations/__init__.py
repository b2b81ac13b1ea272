"""The history store's Alembic migrations (workflows/history/store.py applies them in place)."""
