"""Concurrent uploads agree on one document, on SQLite (one writer at a time) and on Postgres (real concurrency:
advisory locks per blob, unique keys settling the rest)."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import Engine, func, select

from pipeline.config import Settings
from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.jobs.intake import Accepted, IdempotencyConflict, accept_upload
from pipeline.jobs.options import DocumentOptions
from pipeline.storage import LocalBlobStore
from tests.api.conftest import corpus, png, stored_files

UPLOADERS = 6


def race(db: Engine, blobs: LocalBlobStore, uploads: list[bytes], key: str | None) -> list[Accepted | Exception]:
    """Each upload written by its own thread, then accepted by all of them at once."""
    settings, start = Settings(), threading.Barrier(len(uploads))
    outcomes: list[Accepted | Exception] = [RuntimeError("did not finish")] * len(uploads)

    def run(i: int) -> None:
        writer = blobs.writer()
        writer.write(uploads[i])
        start.wait()
        try:
            outcomes[i] = accept_upload(db, settings, "acme", "a.pdf", writer, DocumentOptions(), key)
        except IdempotencyConflict as exc:
            outcomes[i] = exc
            writer.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(uploads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def count_documents(db: Engine) -> int:
    with session_scope(db) as session:
        return session.scalar(select(func.count(Document.id))) or 0


def test_identical_uploads_at_once_make_one_document(migrated_database: Engine, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    outcomes = race(migrated_database, blobs, [corpus()] * UPLOADERS, key=None)
    assert all(isinstance(outcome, Accepted) for outcome in outcomes)
    assert len({outcome.document.id for outcome in outcomes}) == 1  # type: ignore[union-attr]
    assert sum(outcome.created for outcome in outcomes) == 1  # type: ignore[union-attr]
    assert count_documents(migrated_database) == 1 and len(stored_files(blobs.root)) == 1


def test_one_idempotency_key_used_at_once_for_different_files_makes_one_document(migrated_database: Engine,
                                                                                 tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    outcomes = race(migrated_database, blobs, [png(8, 8 + i) for i in range(UPLOADERS)], key="order-17")
    accepted = [outcome for outcome in outcomes if isinstance(outcome, Accepted)]
    assert len(accepted) == 1 and accepted[0].created
    assert all(isinstance(outcome, IdempotencyConflict) for outcome in outcomes if outcome is not accepted[0])
    assert count_documents(migrated_database) == 1
    assert [path.name for path in stored_files(blobs.root)] == [accepted[0].document.sha256]
