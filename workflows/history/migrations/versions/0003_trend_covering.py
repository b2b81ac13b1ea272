"""Covering indexes for the trend question: a reproducer's judged runs on one SKU by kernel, and a
metric's value by run, read from the indexes alone."""
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("runs_trend", "runs", ["reproducer", "sku", "verdict", "kernel", "kernel_release",
                                           "kernel_commit", "started"])
    op.create_index("metrics_value", "metrics", ["name", "run_id", "value", "unit"])
    op.drop_index("metrics_name", "metrics")


def downgrade():
    op.create_index("metrics_name", "metrics", ["name", "run_id"])
    op.drop_index("metrics_value", "metrics")
    op.drop_index("runs_trend", "runs")
