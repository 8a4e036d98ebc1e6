"""A document and a batch as a client sees them, defined once: the body of `GET /v1/documents/{id}` (less its
links, which name the host the client used) is the `data` of a document's webhook event, and a batch's event
carries its documents counted by status.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Document, Page, Region, shown_options


def document_summary(session: Session, document: Document) -> dict[str, Any]:
    """The document as `GET /v1/documents/{id}` shows it, less `links` (their host is the one a client used,
    which a worker does not know): the API adds them, a webhook sends it as it is."""
    regions = _region_counts(session, document.id)
    error = None if document.error_code is None else {"code": document.error_code,
                                                       "message": document.error_message or document.error_code}
    return {
        "id": document.id, "filename": document.filename, "status": document.status,
        "media_type": document.media_type, "size": document.size_bytes, "sha256": document.sha256,
        "page_count": document.page_count,
        "options": shown_options(document.options),
        "progress": {"pages": {"done": document.pages_done, "total": document.page_count},
                     "regions": {"done": regions[0], "total": regions[1]}},
        "error": error, "timings_ms": dict(document.timings or {}), "created_at": document.created_at,
        "started_at": document.started_at, "finished_at": document.finished_at,
    }


def batch_summary(session: Session, batch: Batch) -> dict[str, Any]:
    """The batch: its documents counted by status, the files it rejected, when it was created and finished."""
    counts = session.execute(select(Document.status, func.count()).where(Document.batch_id == batch.id)
                             .group_by(Document.status)).all()
    return {"id": batch.id, "document_count": batch.document_count,
            "documents": {status: count for status, count in sorted(counts)}, "rejected": list(batch.rejected),
            "created_at": batch.created_at, "finished_at": batch.finished_at}


def _region_counts(session: Session, document_id: str) -> tuple[int, int]:
    """(regions no longer pending, regions so far) over the document's pages."""
    done = func.coalesce(func.sum(case((Region.status != "pending", 1), else_=0)), 0)
    row = session.execute(select(done, func.count(Region.id)).join(Page, Region.page_id == Page.id)
                          .where(Page.document_id == document_id)).one()
    return int(row[0]), int(row[1])
