"""The bookkeeping the stages share: whether a document is still wanted, a page finished and counted once, and the
blobs a stage records kept alive.

A page reaches its final state in `finish_page`, whose conditional update succeeds once per page; that transaction
also counts the page on its document, so exactly one page — the last — sends finalize, however the pages
interleave across workers. Every transaction that writes a document's pages or regions takes the document's row
lock through `wanted` or `lock_document` first, as cancel does, so nothing is written once a cancel has committed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.db.models import Document, Page, utcnow
from pipeline.documents.process import ProcessOptions
from pipeline.documents.results import Problem
from pipeline.jobs.context import Context
from pipeline.jobs.intake import lock_blobs
from pipeline.jobs.options import DocumentOptions

OPEN_PAGE = ("queued", "processing")


def wanted(session: Session, document_id: str) -> Document | None:
    """The document, row-locked until the transaction ends, unless it was deleted or canceled: then None, and the
    caller writes nothing (cancel takes the same lock, so nothing is written after a cancel commits)."""
    document = session.scalars(select(Document).where(Document.id == document_id).with_for_update()).one_or_none()
    return None if document is None or document.status == "canceled" else document


def lock_document(session: Session, document_id: str) -> bool:
    """`wanted` for a transaction that writes only the document's pages and regions: the row lock, and False where
    `wanted` says None, without loading the document."""
    status = session.execute(select(Document.status).where(Document.id == document_id).with_for_update()).scalar()
    return status not in (None, "canceled")


def finish_page(session: Session, page_id: int, document_id: str, problem: Problem | None,
                model: str | None = None) -> bool:
    """Move an open page to its final state and count it (recording the `model` that recognised it, if one did);
    True when it was the document's last page."""
    moved = session.execute(update(Page).where(Page.id == page_id, Page.status.in_(OPEN_PAGE)).values(
        status="failed" if problem else "succeeded", error_code=problem.code if problem else None,
        error_message=problem.message if problem else None, updated_at=utcnow()))
    if moved.rowcount != 1:  # finished by an earlier delivery of this task
        return False
    recorded = {"model": model} if model else {}
    done, total = session.execute(update(Document).where(Document.id == document_id)
                                  .values(pages_done=Document.pages_done + 1, **recorded)
                                  .returning(Document.pages_done, Document.page_count)).one()
    return done >= (total or 0)


def keep_blobs(session: Session, ctx: Context, blobs: dict[str, bytes]) -> None:
    """Blobs are shared by content: a delete of another document may have removed one of these since it was put.
    Under the blob locks (held until this transaction that records the keys commits), put back any that went."""
    lock_blobs(session, sorted(blobs))
    for key, data in blobs.items():
        if not ctx.blobs.exists(key):
            ctx.blobs.put(data)


def stored_options(ctx: Context, options: dict[str, Any]) -> ProcessOptions:
    """A document's stored options as the library pipeline takes them, resolved against this process's settings."""
    return DocumentOptions(**options).for_pipeline(ctx.settings)
