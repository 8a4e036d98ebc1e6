"""regions: `skipped`, a region that needed the model where there was none (the service without a model)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('regions') as batch:
        batch.drop_constraint(op.f('ck_regions_status'), type_='check')
        batch.create_check_constraint('status', "status IN ('pending', 'succeeded', 'failed', 'skipped')")


def downgrade() -> None:
    # A skipped region had no content: it reads as the failure it was before this revision could tell them apart.
    op.execute("UPDATE regions SET status = 'failed' WHERE status = 'skipped'")
    with op.batch_alter_table('regions') as batch:
        batch.drop_constraint(op.f('ck_regions_status'), type_='check')
        batch.create_check_constraint('status', "status IN ('pending', 'succeeded', 'failed')")
