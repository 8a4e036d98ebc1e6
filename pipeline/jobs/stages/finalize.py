"""The `finalize` stage: assemble a finished document's Markdown and JSON from its rows, give it its final status
once, and send the webhook events that status announces.

The last page to finish sends it, but so may a re-delivered task of any finished page: it returns at once unless
every page is done, and the conditional update that sets the status lets only one run record the events.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import selectinload

from pipeline.db.models import Document, Page, shown_options, utcnow
from pipeline.db.session import session_scope
from pipeline.documents.assemble import MarkdownOptions, document_json, document_markdown
from pipeline.documents.process import document_status
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Send
from pipeline.jobs.events import announce_document
from pipeline.jobs.rows import document_output, page_output, picture_links
from pipeline.jobs.stages.pages import keep_blobs


def finalize_document(ctx: Context, document_id: str) -> list[Send]:
    """Assemble the Markdown and JSON from the rows, store them, and set the document's final status once; pictures
    link to the crops the API serves, as `quire process` links the crops it saves."""
    with session_scope(ctx.db) as session:
        document = session.scalars(select(Document).where(Document.id == document_id).options(
            selectinload(Document.pages).selectinload(Page.regions))).one_or_none()
        if document is None or document.status != "processing" or document.pages_done < (document.page_count or 0):
            return []
        pages = [page_output(page) for page in document.pages]
        status = "failed" if document.error_code else document_status(pages)
        finished = utcnow()
        timings = {**document.timings, "total": (finished - document.created_at).total_seconds() * 1000.0}
        output = replace(document_output(document, status), timings_ms=timings)  # written once, with the status
        pictures = MarkdownOptions(pictures=picture_links(document_id, document.pages))
    results = {"json": _json_bytes(document_json(output, pictures)),
               "markdown": document_markdown(output, pictures).encode()}
    result_key, markdown_key = ctx.blobs.put(results["json"]), ctx.blobs.put(results["markdown"])
    with session_scope(ctx.db) as session:
        keep_blobs(session, ctx, {result_key: results["json"], markdown_key: results["markdown"]})
        options = shown_options(document.options)
        finished_now = session.execute(update(Document).where(
            Document.id == document_id, Document.status == "processing").values(
            status=status, result_key=result_key, markdown_key=markdown_key, finished_at=finished,
            timings=timings, options=options, updated_at=finished)).rowcount == 1
        announced = announce_document(session, document_id) if finished_now else []  # its events, recorded once
    return [Send("deliver", delivery_id) for delivery_id in announced]


def _json_bytes(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode()
