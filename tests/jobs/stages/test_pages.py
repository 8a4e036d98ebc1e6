"""The page bookkeeping the stages share, on a real database of each dialect: a page is counted once, the last one
says so, and nothing is written for a document that is canceled or gone."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from pipeline.db.models import Document, Page
from pipeline.db.session import session_scope
from pipeline.documents.results import Problem
from pipeline.jobs.stages.pages import finish_page, lock_document


def document_with_pages(db: Engine, pages: int, status: str = "processing") -> tuple[str, list[int]]:
    with session_scope(db) as session:
        document = Document(tenant="acme", filename="a.pdf", sha256="0" * 64, size_bytes=1, status=status,
                            page_count=pages, pages=[Page(index=i, status="processing") for i in range(pages)])
        session.add(document)
        session.flush()
        return document.id, [page.id for page in document.pages]


@pytest.mark.parametrize("status, held", [("processing", True), ("queued", True), ("canceled", False)])
def test_lock_document_says_whether_the_document_is_still_wanted(migrated_database: Engine, status: str, held: bool):
    document_id, _ = document_with_pages(migrated_database, 1, status)
    with session_scope(migrated_database) as session:
        assert lock_document(session, document_id) is held
        assert lock_document(session, "no-such-document") is False


def test_each_page_is_counted_once_the_last_says_so_and_the_model_is_recorded(migrated_database: Engine):
    document_id, (first, last) = document_with_pages(migrated_database, 2)
    with session_scope(migrated_database) as session:
        assert finish_page(session, first, document_id, None, "the-model") is False
        assert finish_page(session, first, document_id, None, "the-model") is False  # a re-delivery counts nothing
        assert finish_page(session, last, document_id, Problem("render_failed", "no pixels")) is True
    with session_scope(migrated_database) as session:
        document = session.get(Document, document_id)
        pages = session.execute(select(Page.status, Page.error_code).order_by(Page.index)).all()
    assert (document.pages_done, document.model) == (2, "the-model")
    assert [tuple(page) for page in pages] == [("succeeded", None), ("failed", "render_failed")]
