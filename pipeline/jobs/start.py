"""Where work enters the stage graph from outside it: an accepted upload or batch, a document sent again (the
reaper, the embedded mode's resume), a cancel's webhook, and the webhook retries a restart must schedule again.

Callers never name a stage: which stage starts a document or delivers an event is the graph's business, and
`graph.enter` takes only its entries. Call each of these once the transaction that made the work visible has
committed.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Engine, and_, select
from sqlalchemy.orm import aliased

from pipeline.db.models import WebhookDelivery, utcnow
from pipeline.db.session import session_scope
from pipeline.jobs.batches import AcceptedBatch
from pipeline.jobs.dispatch import Dispatcher
from pipeline.jobs.graph import START, enter


def start_document(dispatcher: Dispatcher, document_id: str) -> None:
    """Start the document's work, or start it again: the first stage is idempotent and passes every page that is
    further along to where it stopped."""
    enter(dispatcher, START, document_id)


def start_batch(dispatcher: Dispatcher, accepted: AcceptedBatch) -> None:
    """Start the documents the batch created (the others repeat documents already started). Only once every
    document of the batch is recorded, so none of them finishes the batch before its siblings exist."""
    for document_id in accepted.created:
        start_document(dispatcher, document_id)


def send_deliveries(dispatcher: Dispatcher, delivery_ids: Iterable[str]) -> None:
    """Deliver events announced outside any stage (a cancel's)."""
    for delivery_id in delivery_ids:
        enter(dispatcher, "deliver", delivery_id)


def resume_deliveries(db: Engine, dispatcher: Dispatcher) -> int:
    """Send `deliver` again for every attempt scheduled and not made, each when it is due: the embedded mode's
    scheduled retries live in memory and are gone after a restart. Returns how many were sent."""
    previous = aliased(WebhookDelivery)
    with session_scope(db) as session:
        scheduled = session.execute(
            select(WebhookDelivery.delivery_id, previous.next_attempt_at).outerjoin(previous, and_(
                previous.delivery_id == WebhookDelivery.delivery_id, previous.attempt == WebhookDelivery.attempt - 1))
            .where(WebhookDelivery.attempted_at.is_(None))).all()
    now = utcnow()
    for delivery_id, due in scheduled:
        enter(dispatcher, "deliver", delivery_id, delay_s=max(0.0, (due - now).total_seconds()) if due else 0.0)
    return len(scheduled)
