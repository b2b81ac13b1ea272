"""The runs, their metrics and their thresholds' outcomes."""
from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_dir", sa.Text, nullable=False, unique=True),
        sa.Column("workflow", sa.String(32), nullable=False),
        sa.Column("reproducer", sa.String(200)), sa.Column("preset", sa.String(200)),
        sa.Column("params", sa.Text),
        sa.Column("kernel", sa.String(200)), sa.Column("kernel_release", sa.String(200)),
        sa.Column("kernel_commit", sa.String(64)), sa.Column("kernel_config", sa.String(64)),
        sa.Column("series", sa.Text), sa.Column("patchset_hash", sa.String(128)),
        sa.Column("rig", sa.String(200)), sa.Column("driver", sa.String(64)),
        sa.Column("server_model", sa.String(200)), sa.Column("server_firmware", sa.Text),
        sa.Column("ram_bytes", sa.BigInteger), sa.Column("cpus", sa.Integer), sa.Column("numa_nodes", sa.Integer),
        sa.Column("verdict", sa.String(32)), sa.Column("cause", sa.String(64)), sa.Column("reason", sa.Text),
        sa.Column("started", sa.String(40)), sa.Column("ended", sa.String(40)),
        sa.Column("host_load", sa.String(64)), sa.Column("controller", sa.String(200)),
    )
    op.create_table(
        "metrics",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("value", sa.Float), sa.Column("unit", sa.String(64)),
        sa.PrimaryKeyConstraint("run_id", "name"),
    )
    op.create_table(
        "thresholds",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("outcome", sa.String(32)), sa.Column("limit_text", sa.Text),
        sa.PrimaryKeyConstraint("run_id", "name"),
    )


def downgrade():
    op.drop_table("thresholds")
    op.drop_table("metrics")
    op.drop_table("runs")
