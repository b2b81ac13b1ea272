"""Alembic's environment: the connection comes from workflows/history/store.py (config.attributes)."""
from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
