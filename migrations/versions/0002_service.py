"""service: dedup key, finished-page counter and result blobs on documents; region crops; a per-tenant cache

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table('documents') as batch:
        batch.add_column(sa.Column('dedup_key', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('pages_done', sa.Integer(), nullable=False, server_default='0'))
        batch.add_column(sa.Column('markdown_key', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('result_key', sa.String(length=64), nullable=True))
        batch.create_unique_constraint(op.f('uq_documents_dedup_key'), ['dedup_key'])
    with op.batch_alter_table('documents') as batch:
        batch.alter_column('pages_done', server_default=None)
    with op.batch_alter_table('regions') as batch:
        batch.add_column(sa.Column('crop_px', JSON, nullable=True))
    # Cached results carry no tenant yet, so they cannot be attributed to one: the cache starts empty.
    op.execute('DELETE FROM recognition_cache')
    with op.batch_alter_table('recognition_cache') as batch:
        batch.add_column(sa.Column('tenant', sa.String(length=128), nullable=False))
        batch.drop_constraint('uq_recognition_cache_model_revision_task_image_sha256', type_='unique')
        batch.create_unique_constraint(op.f('uq_recognition_cache_tenant_model_revision_task_image_sha256'),
                                       ['tenant', 'model_revision', 'task', 'image_sha256'])


def downgrade() -> None:
    op.execute('DELETE FROM recognition_cache')
    with op.batch_alter_table('recognition_cache') as batch:
        batch.drop_constraint('uq_recognition_cache_tenant_model_revision_task_image_sha256', type_='unique')
        batch.create_unique_constraint('uq_recognition_cache_model_revision_task_image_sha256',
                                       ['model_revision', 'task', 'image_sha256'])
        batch.drop_column('tenant')
    with op.batch_alter_table('regions') as batch:
        batch.drop_column('crop_px')
    with op.batch_alter_table('documents') as batch:
        batch.drop_constraint('uq_documents_dedup_key', type_='unique')
        batch.drop_column('result_key')
        batch.drop_column('markdown_key')
        batch.drop_column('pages_done')
        batch.drop_column('dedup_key')
