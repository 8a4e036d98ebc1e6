"""Canceling a document: the status changes at once, under the document's row lock; the work stops behind it.

The stages take the same row lock in every transaction that writes a document's pages or regions and write nothing
once it says `canceled`, so no region row changes after the cancel commits. Work not started yet finds the document
canceled and returns; the requests of a recognize task waiting on the engine are aborted by its process's cancel
watcher (cancel_watch.py) within CANCEL_POLL_S.
"""

from __future__ import annotations

from sqlalchemy import Engine, select

from pipeline.db.models import Document, shown_options, utcnow
from pipeline.db.session import session_scope
from pipeline.jobs.dispatch import Dispatcher
from pipeline.jobs.events import announce_document
from pipeline.jobs.start import send_deliveries

CANCELABLE = ("queued", "processing")


class NotCancelable(Exception):
    """The document has already finished; `code` is the API's error code."""

    code = "not_cancelable"

    def __init__(self, document_id: str, status: str) -> None:
        super().__init__(f"document {document_id} is already {status}")


def cancel_document(db: Engine, dispatcher: Dispatcher, tenant: str, document_id: str) -> Document | None:
    """Mark the tenant's document canceled (again is fine) and announce `document.canceled` to its webhook; None
    when the tenant has no such document."""
    with session_scope(db) as session:
        document = session.scalars(select(Document).where(Document.id == document_id, Document.tenant == tenant)
                                   .with_for_update()).one_or_none()
        if document is None or document.status == "canceled":
            return document
        if document.status not in CANCELABLE:
            raise NotCancelable(document_id, document.status)
        document.status, document.finished_at = "canceled", utcnow()
        document.dedup_key = None  # a new upload of the same file is a new document
        document.options = shown_options(document.options)
        session.flush()
        announced = announce_document(session, document_id)  # recorded with the status change, so exactly once
    send_deliveries(dispatcher, announced)
    return document
