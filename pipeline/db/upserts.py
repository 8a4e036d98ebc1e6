"""Writes that must be idempotent under task re-delivery and concurrent workers: INSERT … ON CONFLICT.

Many rows go as one statement with a list of parameter sets (executemany, which SQLAlchemy batches into multi-row
VALUES), never as `.values([...])`: a statement with its rows inlined is compiled afresh every time (a few ms each,
once per page), while this one is compiled once per process.

A task that dies after writing and is re-delivered writes the same rows again; a select-then-insert would race
with a sibling worker and fail on the unique constraint, so these let the database decide in one statement.
Postgres and SQLite (3.24+) share the ON CONFLICT syntax; only the insert construct differs per dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import Connection, Row, Table, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .models import Page, RecognitionCache, Region, utcnow


def _insert(session: Session, table: Table) -> Any:
    return _dialect_insert(session.get_bind().dialect.name, table)


def _dialect_insert(dialect: str, table: Table) -> Any:
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported database dialect {dialect!r}: Quire runs on Postgres and SQLite")


@lru_cache(maxsize=32)
def _region_upsert(dialect: str, columns: frozenset[str]) -> Any:
    """The upsert of regions given these columns, built once (building `excluded` costs more than running it)."""
    statement = _dialect_insert(dialect, Region.__table__)
    changed = {key: statement.excluded[key] for key in columns if key not in ("id", "page_id", "index")}
    return statement.on_conflict_do_update(index_elements=["page_id", "index"], set_=changed)


def upsert_regions(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert regions, or overwrite the columns given in rows where (page_id, index) already exists.

    Rows are whole regions (layout columns and result together): the database checks NOT NULL on the proposed
    row before it looks for a conflict, so a row without label or boxes fails even when it would only update.
    Every row must carry the same keys (one statement for all of them); columns left out keep their stored
    values on conflict.
    """
    if not rows:
        return
    keys = set(rows[0])
    if any(set(row) != keys for row in rows):
        raise ValueError("upsert_regions: every row must have the same columns")
    now = utcnow()
    statement = _region_upsert(session.get_bind().dialect.name, frozenset(keys | {"updated_at"}))
    session.execute(statement, [{**row, "updated_at": now} for row in rows])


class CropKey(NamedTuple):
    """What identifies a recognised crop in the cache: same tenant, model revision, task and pixels."""

    tenant: str
    model_revision: str
    task: str
    image_sha256: str


def remember_recognitions(session: Session, results: Sequence[tuple[CropKey, dict[str, Any]]]) -> None:
    """Cache crops' content, each as its columns (asdict of a RegionContent, pipeline/documents/results.py), in one
    statement; per crop the first writer wins, because every writer computed the same greedy output."""
    if not results:
        return
    now = utcnow()
    session.execute(_cache_insert(session.get_bind().dialect.name),
                    [{**key._asdict(), "created_at": now, **result} for key, result in results])


@lru_cache(maxsize=4)
def _cache_insert(dialect: str) -> Any:
    statement = _dialect_insert(dialect, RecognitionCache.__table__)
    return statement.on_conflict_do_nothing(index_elements=list(CropKey._fields))


def recall_recognitions(session: Session | Connection, keys: Sequence[CropKey]) -> list[Row | None]:
    """The cached row for each crop under its tenant, model revision and task (None where none was stored), in one
    query; jobs/rows.py's from_columns reads its content back. Plain rows, not ORM objects: nothing here is
    changed, and building mapped instances cost more than the query on a busy GPU worker."""
    if not keys:
        return []
    table = RecognitionCache.__table__
    columns = tuple_(*(table.c[name] for name in CropKey._fields))
    found = session.execute(select(table).where(columns.in_([tuple(key) for key in set(keys)])))
    by_key = {CropKey(*(getattr(hit, name) for name in CropKey._fields)): hit for hit in found}
    return [by_key.get(key) for key in keys]


def insert_pages(session: Session, document_id: str, count: int) -> None:
    """One queued page row per page index; pages that exist already (a re-delivered ingest) are left as they are."""
    if count <= 0:
        return
    now = utcnow()
    rows = [{"document_id": document_id, "index": index, "status": "queued", "rotation": 0, "timings": {},
             "created_at": now, "updated_at": now} for index in range(count)]
    session.execute(_insert(session, Page.__table__).on_conflict_do_nothing(index_elements=["document_id", "index"]),
                    rows)
