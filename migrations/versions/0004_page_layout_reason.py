"""pages: why the layout that laid a page out was used, when it is not simply the one asked for

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, with no backfill: pages laid out before this revision did not record a reason, and None is what
    # the result JSON says for a page laid out as asked.
    with op.batch_alter_table('pages') as batch:
        batch.add_column(sa.Column('layout_reason', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('pages') as batch:
        batch.drop_column('layout_reason')
