"""initial schema: documents, pages, regions, recognition cache

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The types as created here, spelled out rather than imported from the models so this revision stays as written.
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table('documents',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant', sa.String(length=128), nullable=False),
    sa.Column('filename', sa.String(length=1024), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('media_type', sa.String(length=64), nullable=True),
    sa.Column('page_count', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('options', JSON, nullable=False),
    sa.Column('model', sa.String(length=512), nullable=True),
    sa.Column('timings', JSON, nullable=False),
    sa.Column('idempotency_key', sa.String(length=256), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("status IN ('queued', 'processing', 'succeeded', 'partial', 'failed', 'canceled')",
                       name=op.f('ck_documents_status')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_documents')),
    sa.UniqueConstraint('tenant', 'idempotency_key', name=op.f('uq_documents_tenant_idempotency_key'))
    )
    op.create_index(op.f('ix_documents_tenant_created_at'), 'documents', ['tenant', 'created_at'], unique=False)
    op.create_index(op.f('ix_documents_tenant_sha256'), 'documents', ['tenant', 'sha256'], unique=False)

    op.create_table('recognition_cache',
    sa.Column('id', BIG_ID, autoincrement=True, nullable=False),
    sa.Column('model_revision', sa.String(length=512), nullable=False),
    sa.Column('task', sa.String(length=16), nullable=False),
    sa.Column('image_sha256', sa.String(length=64), nullable=False),
    sa.Column('text', sa.Text(), nullable=True),
    sa.Column('html', sa.Text(), nullable=True),
    sa.Column('latex', sa.Text(), nullable=True),
    sa.Column('finish_reason', sa.String(length=16), nullable=True),
    sa.Column('truncated', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_recognition_cache')),
    sa.UniqueConstraint('model_revision', 'task', 'image_sha256',
                        name=op.f('uq_recognition_cache_model_revision_task_image_sha256'))
    )
    op.create_table('pages',
    sa.Column('id', BIG_ID, autoincrement=True, nullable=False),
    sa.Column('document_id', sa.String(length=36), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('width_px', sa.Integer(), nullable=True),
    sa.Column('height_px', sa.Integer(), nullable=True),
    sa.Column('width_pt', sa.Float(), nullable=True),
    sa.Column('height_pt', sa.Float(), nullable=True),
    sa.Column('dpi', sa.Float(), nullable=True),
    sa.Column('rotation', sa.Integer(), nullable=False),
    sa.Column('image_key', sa.String(length=64), nullable=True),
    sa.Column('layout', sa.String(length=64), nullable=True),
    sa.Column('markdown', sa.Text(), nullable=True),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('timings', JSON, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("status IN ('queued', 'processing', 'succeeded', 'failed')", name=op.f('ck_pages_status')),
    sa.ForeignKeyConstraint(['document_id'], ['documents.id'], name=op.f('fk_pages_document_id_documents'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pages')),
    sa.UniqueConstraint('document_id', 'index', name=op.f('uq_pages_document_id_index'))
    )
    op.create_table('regions',
    sa.Column('id', BIG_ID, autoincrement=True, nullable=False),
    sa.Column('page_id', BIG_ID, nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('reading_order', sa.Integer(), nullable=False),
    sa.Column('label', sa.String(length=32), nullable=False),
    sa.Column('score', sa.Float(), nullable=True),
    sa.Column('bbox_px', JSON, nullable=False),
    sa.Column('bbox_pt', JSON, nullable=False),
    sa.Column('task', sa.String(length=16), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=True),
    sa.Column('text', sa.Text(), nullable=True),
    sa.Column('html', sa.Text(), nullable=True),
    sa.Column('latex', sa.Text(), nullable=True),
    sa.Column('finish_reason', sa.String(length=16), nullable=True),
    sa.Column('truncated', sa.Boolean(), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), nullable=True),
    sa.Column('generated_tokens', sa.Integer(), nullable=True),
    sa.Column('cached_tokens', sa.Integer(), nullable=True),
    sa.Column('ttft_ms', sa.Float(), nullable=True),
    sa.Column('decode_ms', sa.Float(), nullable=True),
    sa.Column('latency_ms', sa.Float(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("source IN ('model', 'text-layer', 'cache', 'none')", name=op.f('ck_regions_source')),
    sa.CheckConstraint("status IN ('pending', 'succeeded', 'failed')", name=op.f('ck_regions_status')),
    sa.ForeignKeyConstraint(['page_id'], ['pages.id'], name=op.f('fk_regions_page_id_pages'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_regions')),
    sa.UniqueConstraint('page_id', 'index', name=op.f('uq_regions_page_id_index'))
    )


def downgrade() -> None:
    op.drop_table('regions')
    op.drop_table('pages')
    op.drop_table('recognition_cache')
    op.drop_index(op.f('ix_documents_tenant_sha256'), table_name='documents')
    op.drop_index(op.f('ix_documents_tenant_created_at'), table_name='documents')
    op.drop_table('documents')
