"""A run's SKU (the class of machine its numbers compare within), and the indexes the questions use."""
from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("runs") as b:
        b.add_column(sa.Column("sku", sa.String(200)))
    op.execute("UPDATE runs SET sku = rig WHERE sku IS NULL")
    op.create_index("runs_repro_started", "runs", ["reproducer", "started"])
    op.create_index("runs_rig_started", "runs", ["rig", "started"])
    op.create_index("metrics_name", "metrics", ["name", "run_id"])


def downgrade():
    op.drop_index("metrics_name", "metrics")
    op.drop_index("runs_rig_started", "runs")
    op.drop_index("runs_repro_started", "runs")
    with op.batch_alter_table("runs") as b:
        b.drop_column("sku")
