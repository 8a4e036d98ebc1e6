"""The process's cancel watcher, on a real database of each dialect: one query a poll for every document waited on,
and the waits of a canceled or deleted document (only those) aborted, once."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest
from sqlalchemy import Engine, event, update

from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.jobs.cancel_watch import CancelWatch


def documents(db: Engine, count: int) -> list[str]:
    with session_scope(db) as session:
        added = [Document(tenant="acme", filename=f"{i}.pdf", sha256="0" * 64, size_bytes=1, status="processing")
                 for i in range(count)]
        session.add_all(added)
        session.flush()
        return [document.id for document in added]


def set_status(db: Engine, document_id: str, status: str) -> None:
    with session_scope(db) as session:
        session.execute(update(Document).where(Document.id == document_id).values(status=status))


def test_a_poll_aborts_the_waits_of_canceled_and_deleted_documents_and_no_others(migrated_database: Engine):
    kept, canceled, deleted = documents(migrated_database, 3)
    set_status(migrated_database, canceled, "canceled")
    with session_scope(migrated_database) as session:
        session.delete(session.get(Document, deleted))
    watch, aborted = CancelWatch(migrated_database, poll_s=3600), []
    with watch.watching(kept, lambda: aborted.append("kept")), \
            watch.watching(canceled, lambda: aborted.append("canceled")), \
            watch.watching(canceled, lambda: aborted.append("canceled, its other page")), \
            watch.watching(deleted, lambda: aborted.append("deleted")):
        watch.poll()
        watch.poll()  # each wait is aborted once
    assert sorted(aborted) == ["canceled", "canceled, its other page", "deleted"]
    watch.close()


def test_one_query_a_poll_however_many_wait(migrated_database: Engine):
    ids = documents(migrated_database, 12)
    watch, statements = CancelWatch(migrated_database, poll_s=3600), []

    def count(connection, cursor, statement: str, *args) -> None:
        statements.append(statement)

    event.listen(migrated_database, "before_cursor_execute", count)
    try:
        with ExitStack() as waits:
            for document_id in ids:
                waits.enter_context(watch.watching(document_id, lambda: pytest.fail("nothing was canceled")))
            watch.poll()
    finally:
        event.remove(migrated_database, "before_cursor_execute", count)
    selects = [statement.split()[:4] for statement in statements if statement.startswith("SELECT")]
    assert selects == [["SELECT", "documents.id", "FROM", "documents"]]
    watch.close()


def test_a_wait_that_ended_is_not_aborted(migrated_database: Engine):
    (document_id,) = documents(migrated_database, 1)
    watch, aborted = CancelWatch(migrated_database, poll_s=3600), []
    with watch.watching(document_id, lambda: aborted.append(document_id)):
        pass
    set_status(migrated_database, document_id, "canceled")
    watch.poll()
    assert aborted == []
    watch.close()


def test_the_watcher_thread_aborts_within_a_poll_of_the_cancel(migrated_database: Engine):
    (document_id,) = documents(migrated_database, 1)
    watch, aborted = CancelWatch(migrated_database, poll_s=0.05), threading.Event()
    with watch.watching(document_id, aborted.set):
        assert not aborted.wait(0.3)
        set_status(migrated_database, document_id, "canceled")
        assert aborted.wait(5)
    watch.close()


def test_a_failed_poll_is_logged_and_the_next_one_tries_again(migrated_database: Engine,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture):
    (document_id,) = documents(migrated_database, 1)
    watch, aborted, polls = CancelWatch(migrated_database, poll_s=0.02), threading.Event(), []
    real = watch.poll

    def flaky() -> None:
        polls.append(1)
        if len(polls) == 1:
            raise ConnectionError("the database is away")
        real()

    monkeypatch.setattr(watch, "poll", flaky)
    set_status(migrated_database, document_id, "canceled")
    with watch.watching(document_id, aborted.set):
        assert aborted.wait(5)
    watch.close()
    assert "looking for canceled documents failed" in caplog.text
