"""The reaper: a document whose work was lost is sent again instead of waiting forever.

Work can be lost where no redelivery covers it: a process that dies between a commit and the send after it, a
broker that loses its data, the embedded mode's in-memory queues. Every stage writes as it progresses (a page's
row when it is laid out and when it finishes, its document's row when the page is counted), so a document in
`queued` or `processing` whose row and pages' rows have not moved for `stale_after_s` is taken for lost: the
reaper starts it again, and its first stage passes every open page on to where it stopped (every stage is
idempotent).

A document waiting behind a long queue looks just as still, so `stale_after_s` (QUIRE_REAP_AFTER_S) should exceed
the longest wait expected; guessing short costs duplicate work, never duplicate results. The reaper touches the
document's `updated_at` in the conditional update that claims it, so each document is sent again at most once per
`stale_after_s`, however many reapers run.

Who runs it: a `ReaperThread` every QUIRE_REAP_INTERVAL_S, in the embedded service and in every Celery worker's
main process; there each tick first takes the interval's turn in Redis (workers/reaping.py), so one worker reaps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from pipeline.db.models import Document, Page, utcnow
from pipeline.db.session import session_scope
from pipeline.jobs.context import Context
from pipeline.jobs.start import start_document

log = logging.getLogger("quire.reaper")
UNFINISHED = ("queued", "processing")


def reap(ctx: Context, stale_after_s: float) -> list[str]:
    """Start again every unfinished document that has not moved for stale_after_s; their ids."""
    cutoff = utcnow() - timedelta(seconds=stale_after_s)
    with session_scope(ctx.db) as session:
        stale = session.execute(select(Document.id, Document.updated_at).where(
            Document.status.in_(UNFINISHED), Document.updated_at < cutoff,
            ~exists().where(Page.document_id == Document.id, Page.updated_at >= cutoff))).all()
        claimed = [document_id for document_id, seen in stale if _claim(session, document_id, seen)]
    for document_id in claimed:
        log.warning("document %s has not moved for %.0f s: sending it again", document_id, stale_after_s,
                    extra={"document_id": document_id})
        start_document(ctx.dispatcher, document_id)
    return claimed


def _claim(session: Session, document_id: str, seen: datetime) -> bool:
    """Touch the document unless someone (a stage, another reaper) did since it was read."""
    return session.execute(update(Document).where(
        Document.id == document_id, Document.updated_at == seen, Document.status.in_(UNFINISHED))
        .values(updated_at=utcnow())).rowcount == 1


class ReaperThread:
    """Reaps every QUIRE_REAP_INTERVAL_S on a daemon thread, on the ticks `my_turn` allows; a tick that fails (the
    database or the broker away) is logged, and the next one tries again."""

    def __init__(self, ctx: Context, my_turn: Callable[[], bool] = lambda: True) -> None:
        self.ctx, self.my_turn = ctx, my_turn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="quire-reaper")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        settings = self.ctx.settings
        while not self._stop.wait(settings.reap_interval_s):
            try:
                if self.my_turn():
                    reap(self.ctx, settings.reap_after_s)
            except Exception:
                log.warning("reaping failed", exc_info=True)
