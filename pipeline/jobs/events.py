"""Webhook events: which ones a document or a batch announces, to which URL, and what their body says.

An event is recorded inside the transaction that makes it true (the conditional update that gives a document its
final status, the one that marks a batch finished), as the row of its first delivery attempt. So an event is
recorded exactly once however tasks are re-delivered, and a crash between that commit and sending `deliver` loses
nothing: the row says the attempt is still to be made (`pipeline.jobs.start.resume_deliveries`). The caller
sends `deliver` for the returned delivery ids once its transaction has committed: finalize returns them as its
sends, code outside the stages (a cancel) uses `pipeline.jobs.start.send_deliveries`.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import pydantic_core
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from pipeline.db.models import FINAL_DOCUMENT_STATUSES, Batch, Document, Tenant, WebhookDelivery, utcnow
from pipeline.jobs.summaries import batch_summary, document_summary

BATCH_FINISHED = "batch.finished"


def announce_document(session: Session, document_id: str) -> list[str]:
    """Record the events of a document that has just reached its final status, in the transaction that set it:
    `document.<status>` to its callback URL (the upload's, else its tenant's), and `batch.finished` when it was
    the last open document of its batch. Returns the delivery ids to send once the transaction has committed."""
    document = session.get(Document, document_id)
    if document is None or document.status not in FINAL_DOCUMENT_STATUSES:
        return []
    announced = []
    url = document.options.get("callback_url") or _tenant_url(session, document.tenant)
    if url:
        announced.append(_record_event(session, document.tenant, f"document.{document.status}", url,
                                       document_id=document.id))
    if document.batch_id is not None:
        announced += announce_batch(session, document.batch_id)
    return announced


def announce_batch(session: Session, batch_id: str) -> list[str]:
    """Mark the batch finished and record `batch.finished` (to its callback URL, else its tenant's) when none of
    its documents is open any more; once per batch. Returns the delivery ids to send after the commit.

    announce_document calls it for a batch's documents; code that makes a batch whose documents are all final
    from the start (every one a duplicate of a finished document) calls it itself.
    """
    # The batch's row lock orders its last documents' transactions: whichever takes it second sees the first's
    # final status, so one of them always finds no document open. (SQLite serialises writers anyway.)
    batch = session.scalars(select(Batch).where(Batch.id == batch_id).with_for_update()).one_or_none()
    if batch is None or batch.finished_at is not None or _open_documents(session, batch_id):
        return []
    finished = session.execute(update(Batch).where(Batch.id == batch_id, Batch.finished_at.is_(None))
                               .values(finished_at=utcnow()))
    url = batch.callback_url or _tenant_url(session, batch.tenant)
    if finished.rowcount != 1 or not url:
        return []
    return [_record_event(session, batch.tenant, BATCH_FINISHED, url, batch_id=batch_id)]


def event_body(session: Session, delivery: WebhookDelivery, created: datetime) -> bytes:
    """The JSON body of delivery's event, `{id, type, created, data}`: id is the delivery id (Quire-Delivery),
    created when the event happened, data the document's summary or the batch's."""
    if delivery.document_id is not None:
        data = document_summary(session, session.get_one(Document, delivery.document_id))
    else:
        assert delivery.batch_id is not None  # an event is about a document or a batch
        data = batch_summary(session, session.get_one(Batch, delivery.batch_id))
    body = {"id": delivery.delivery_id, "type": delivery.event, "created": created, "data": data}
    return pydantic_core.to_json(body)


def _record_event(session: Session, tenant: str, event: str, url: str, document_id: str | None = None,
                  batch_id: str | None = None) -> str:
    """The event's first delivery attempt, scheduled; its delivery id."""
    delivery_id = str(uuid.uuid4())
    session.add(WebhookDelivery(delivery_id=delivery_id, tenant=tenant, document_id=document_id, batch_id=batch_id,
                                event=event, url=url, attempt=1))
    session.flush()
    return delivery_id


def _tenant_url(session: Session, tenant: str) -> str | None:
    return session.scalars(select(Tenant.callback_url).where(Tenant.id == tenant)).one_or_none()


def _open_documents(session: Session, batch_id: str) -> int:
    return session.scalar(select(func.count()).select_from(Document).where(
        Document.batch_id == batch_id, Document.status.not_in(FINAL_DOCUMENT_STATUSES))) or 0
