"""The `ingest` stage: open a document, count its pages, and send every page not finished yet to prepare.

It is also how a stalled or restarted document resumes (the reaper and the embedded mode's resume start it again):
prepare passes a page that is further along to its next stage, so sending every open page again is safe.
"""

from __future__ import annotations

import time

from sqlalchemy import select

from pipeline.db.models import FINAL_DOCUMENT_STATUSES, Document, Page, utcnow
from pipeline.db.session import session_scope
from pipeline.db.upserts import insert_pages
from pipeline.documents.errors import DocumentError
from pipeline.documents.results import Problem
from pipeline.documents.source import sniff
from pipeline.documents.stages import open_document
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Send
from pipeline.jobs.stages.pages import OPEN_PAGE, stored_options, wanted


def ingest_document(ctx: Context, document_id: str) -> list[Send]:
    """Open the upload, count its pages, add a row per page and send each page on; bad input fails the document."""
    with session_scope(ctx.db) as session:
        document = session.get(Document, document_id)
        if document is None or document.status in FINAL_DOCUMENT_STATUSES:
            return []
        if document.status == "queued":
            document.status, document.started_at = "processing", utcnow()
        sha256, options = document.sha256, stored_options(ctx, document.options)
    started = time.perf_counter()
    data = ctx.blobs.get(sha256)
    try:
        with open_document(data, options) as opened:
            page_count, media_type = opened.page_count, opened.media_type
    except DocumentError as exc:
        return _fail_document(ctx, document_id, sniff(data), Problem(exc.code, exc.message))
    with session_scope(ctx.db) as session:
        document = wanted(session, document_id)
        if document is None:
            return []
        document.page_count, document.media_type = page_count, media_type
        document.timings = {**document.timings, "ingest": (time.perf_counter() - started) * 1000.0}
        insert_pages(session, document_id, page_count)
    return _open_pages(ctx, document_id)


def _open_pages(ctx: Context, document_id: str) -> list[Send]:
    """prepare every page not yet finished (prepare passes a page that is further along to its next stage)."""
    with session_scope(ctx.db) as session:
        open_pages = session.scalars(select(Page.id).where(Page.document_id == document_id,
                                                           Page.status.in_(OPEN_PAGE)).order_by(Page.index)).all()
        document = session.get(Document, document_id)
        if document is None:
            return []
        complete = document.pages_done >= (document.page_count or 0)
    if not open_pages and complete:  # a re-delivered ingest after every page finished
        return [Send("finalize", document_id)]
    return [Send("prepare", page_id) for page_id in open_pages]


def _fail_document(ctx: Context, document_id: str, media_type: str | None, problem: Problem) -> list[Send]:
    with session_scope(ctx.db) as session:
        document = wanted(session, document_id)
        if document is None:
            return []
        document.error_code, document.error_message = problem.code, problem.message
        document.media_type, document.page_count = media_type, 0
    return [Send("finalize", document_id)]
