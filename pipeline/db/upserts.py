"""Writes that must be idempotent under task re-delivery and concurrent workers: INSERT … ON CONFLICT.

A task that dies after writing and is re-delivered writes the same rows again; a select-then-insert would race
with a sibling worker and fail on the unique constraint, so these let the database decide in one statement.
Postgres and SQLite (3.24+) share the ON CONFLICT syntax; only the insert construct differs per dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .models import RecognitionCache, Region, utcnow


def _insert(session: Session, table: Table) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported database dialect {dialect!r}: Quire runs on Postgres and SQLite")


def upsert_regions(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert regions, or overwrite the columns given in rows where (page_id, index) already exists.

    Rows are whole regions (layout columns and result together): the database checks NOT NULL on the proposed
    row before it looks for a conflict, so a row without label or boxes fails even when it would only update.
    Every row must carry the same keys (one statement for all of them); columns left out keep their stored
    values on conflict.
    """
    if not rows:
        return
    table = Region.__table__
    keys = set(rows[0])
    if any(set(row) != keys for row in rows):
        raise ValueError("upsert_regions: every row must have the same columns")
    now = utcnow()
    statement = _insert(session, table).values([{**row, "updated_at": now} for row in rows])
    changed = {key: statement.excluded[key] for key in keys | {"updated_at"} if key not in ("id", "page_id", "index")}
    session.execute(statement.on_conflict_do_update(index_elements=["page_id", "index"], set_=changed))


def remember_recognition(session: Session, model_revision: str, task: str, image_sha256: str,
                         **result: Any) -> None:
    """Cache one crop's result; the first writer wins, because every writer computed the same greedy output."""
    statement = _insert(session, RecognitionCache.__table__).values(
        model_revision=model_revision, task=task, image_sha256=image_sha256, created_at=utcnow(), **result
    )
    session.execute(statement.on_conflict_do_nothing(index_elements=["model_revision", "task", "image_sha256"]))


def recall_recognition(session: Session, model_revision: str, task: str, image_sha256: str) -> RecognitionCache | None:
    """The cached result for this crop under this model revision and task, if one was stored."""
    return session.scalars(
        select(RecognitionCache).where(
            RecognitionCache.model_revision == model_revision,
            RecognitionCache.task == task,
            RecognitionCache.image_sha256 == image_sha256,
        )
    ).one_or_none()
