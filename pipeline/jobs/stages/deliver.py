"""The `deliver` stage: one attempt at delivering one webhook event, recorded, and the next one scheduled when a
retry is due.

Its key is the delivery id. The attempt's row already exists (written with the event for attempt 1, by the attempt
before otherwise); the stage POSTs, then completes the row with a conditional update. A re-delivered task therefore
records nothing twice, and only the first recording schedules the next attempt. It may POST a second time, though:
delivery is at least once, and receivers tell repeats apart by Quire-Delivery.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.accounts import ensure_tenant
from pipeline.config import Settings
from pipeline.db.models import WebhookDelivery, utcnow
from pipeline.db.session import session_scope
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Send
from pipeline.jobs.events import event_body
from pipeline.webhooks import SIGNATURE_HEADER, Outcome, post, retry_delay, sign

USER_AGENT = "Quire-Webhooks/1"


def attempt_delivery(ctx: Context, delivery_id: str) -> list[Send]:
    """Make the delivery's scheduled attempt, record it, and send this stage again later when a retry is due."""
    with session_scope(ctx.db) as session:
        attempt = _scheduled(session, delivery_id)
        if attempt is None:  # delivered, given up, or its document or batch deleted
            return []
        first = session.scalars(select(WebhookDelivery).where(WebhookDelivery.delivery_id == delivery_id,
                                                              WebhookDelivery.attempt == 1)).one()
        body = event_body(session, attempt, first.created_at)
        secret = ensure_tenant(session, attempt.tenant)[0].webhook_secret
    started = utcnow()
    headers = {SIGNATURE_HEADER: sign(secret, body, int(time.time())), "Quire-Delivery": delivery_id,
               "Quire-Event": attempt.event, "Content-Type": "application/json", "User-Agent": USER_AGENT}
    outcome = post(attempt.url, body, headers, ctx.settings.webhook_allow, ctx.settings.webhook_timeout_s)
    delay = _retry_after(ctx.settings, attempt.attempt, first.attempted_at or started, outcome)
    with session_scope(ctx.db) as session:
        recorded = _record(session, attempt, started, outcome, delay)
    return [Send("deliver", delivery_id, delay_s=delay)] if recorded and delay is not None else []


def _scheduled(session: Session, delivery_id: str) -> WebhookDelivery | None:
    """The delivery's attempt that is scheduled and not made yet; None when there is none."""
    return session.scalars(select(WebhookDelivery).where(WebhookDelivery.delivery_id == delivery_id,
                                                         WebhookDelivery.attempted_at.is_(None))).one_or_none()


def _retry_after(settings: Settings, attempt: int, first: datetime, outcome: Outcome) -> float | None:
    """Seconds until the next attempt; None when the outcome is final or the retry would start past the window.

    A receiver's Retry-After is honoured up to the backoff cap (a receiver cannot park a delivery for a week)."""
    if not outcome.retry:
        return None
    delay = retry_delay(attempt, settings.webhook_backoff_s, settings.webhook_backoff_max_s)
    delay = max(delay, min(outcome.retry_after_s or 0.0, settings.webhook_backoff_max_s))
    late = utcnow() + timedelta(seconds=delay) - first > timedelta(seconds=settings.webhook_retry_window_s)
    return None if late else delay


def _record(session: Session, attempt: WebhookDelivery, started: datetime, outcome: Outcome,
            delay: float | None) -> bool:
    """Complete the attempt's row and schedule the next attempt's; False when a re-delivered task recorded it."""
    due = None if delay is None else utcnow() + timedelta(seconds=delay)
    completed = session.execute(
        update(WebhookDelivery).where(WebhookDelivery.id == attempt.id, WebhookDelivery.attempted_at.is_(None))
        .values(attempted_at=started, status_code=outcome.status_code, error=outcome.error,
                succeeded=outcome.succeeded, duration_ms=outcome.duration_ms, next_attempt_at=due))
    if completed.rowcount != 1:
        return False
    if due is not None:
        session.add(WebhookDelivery(delivery_id=attempt.delivery_id, tenant=attempt.tenant,
                                    document_id=attempt.document_id, batch_id=attempt.batch_id, event=attempt.event,
                                    url=attempt.url, attempt=attempt.attempt + 1))
    return True
