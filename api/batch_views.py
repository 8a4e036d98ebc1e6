"""/v1/batches' response bodies, and the tenant-scoped reads they are made from.

A batch's progress is its documents': counted by status, with their pages and regions summed. `done` says no
document of it is open any more; `finished_at` is when the batch was marked finished, which happens in the
transaction that finishes its last document (pipeline.jobs.events.announce_batch, which also sends its webhook).
"""

from __future__ import annotations

from datetime import datetime

from fastapi import Request
from pydantic import BaseModel, Field
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from api.errors import ApiError
from api.queries import newest_first
from api.schemas import Counts, DocumentState, DocumentSummary, Listing
from api.views import document_summary_view
from pipeline.db.models import DOCUMENT_STATUSES, FINAL_DOCUMENT_STATUSES, Batch, Document, Page, Region
from pipeline.jobs.batches import AcceptedBatch


class Rejection(BaseModel):
    name: str = Field(description="the file's name, or the member's path in the archive")
    code: str = Field(description="unsupported_format, empty, file_too_large, encrypted or unsupported_compression")
    message: str


class BatchMember(BaseModel):
    id: str = Field(description="the document's id (identical files of one batch are one document)")
    name: str


class BatchAccepted(BaseModel):
    id: str
    status_url: str
    documents: list[BatchMember] = Field(description="one per file taken, in upload order")
    rejected: list[Rejection]
    created_at: datetime


class BatchProgress(BaseModel):
    documents: Counts = Field(description="done: documents succeeded, partial, failed or canceled")
    pages: Counts = Field(description="summed over the documents; total null while a document is not opened yet")
    regions: Counts = Field(description="summed over the documents' pages laid out so far")


class BatchStatus(BaseModel):
    id: str
    done: bool = Field(description="no document of the batch is queued or processing any more")
    statuses: dict[DocumentState, int] = Field(description="the batch's documents by status")
    progress: BatchProgress
    options: dict[str, object] = Field(description="the resolved options every document got (no password)")
    callback_url: str | None = Field(description="called once, when the batch has finished")
    rejected: list[Rejection]
    documents: list[DocumentSummary] = Field(description="in upload order; `filename` is the file's name, or the "
                                                         "member's path in the archive")
    created_at: datetime
    finished_at: datetime | None


class BatchSummary(BaseModel):
    id: str
    document_count: int
    rejected_count: int
    created_at: datetime
    finished_at: datetime | None
    status_url: str


class BatchList(Listing[BatchSummary]):
    """The tenant's batches, a page at a time."""


def batch_url(request: Request, batch_id: str) -> str:
    return str(request.url_for("get_batch", batch_id=batch_id))


def batch_accepted_view(request: Request, accepted: AcceptedBatch) -> BatchAccepted:
    batch = accepted.batch
    return BatchAccepted(id=batch.id, status_url=batch_url(request, batch.id), created_at=batch.created_at,
                         documents=[BatchMember(id=document_id, name=name) for name, document_id in accepted.documents],
                         rejected=[Rejection.model_validate(item) for item in batch.rejected])


def owned_batch(session: Session, tenant: str, batch_id: str) -> Batch:
    """The tenant's batch; 404 `batch_not_found` for an unknown id and for another tenant's alike."""
    batch = session.scalars(select(Batch).where(Batch.id == batch_id, Batch.tenant == tenant)).one_or_none()
    if batch is None:
        raise ApiError(404, "batch_not_found", f"no batch {batch_id}")
    return batch


def batch_status_view(request: Request, session: Session, batch: Batch) -> BatchStatus:
    documents = list(session.scalars(select(Document).where(Document.batch_id == batch.id)
                                     .order_by(Document.created_at, Document.id)))
    statuses: dict[DocumentState, int] = dict.fromkeys(DOCUMENT_STATUSES, 0)  # type: ignore[arg-type]
    for document in documents:
        statuses[document.status] += 1  # type: ignore[index]
    finished = sum(statuses[status] for status in FINAL_DOCUMENT_STATUSES)
    unopened = any(document.page_count is None and document.status not in FINAL_DOCUMENT_STATUSES
                   for document in documents)
    pages = Counts(done=sum(document.pages_done for document in documents),
                   total=None if unopened else sum(document.page_count or 0 for document in documents))
    progress = BatchProgress(documents=Counts(done=finished, total=len(documents)), pages=pages,
                             regions=_region_counts(session, batch.id))
    return BatchStatus(
        id=batch.id, done=finished == len(documents), statuses=statuses, progress=progress, options=batch.options,
        callback_url=batch.callback_url, rejected=[Rejection.model_validate(item) for item in batch.rejected],
        documents=[document_summary_view(request, document) for document in documents], created_at=batch.created_at,
        finished_at=batch.finished_at)


def batch_summary_view(request: Request, batch: Batch) -> BatchSummary:
    return BatchSummary(id=batch.id, document_count=batch.document_count, rejected_count=len(batch.rejected),
                        created_at=batch.created_at, finished_at=batch.finished_at,
                        status_url=batch_url(request, batch.id))


def newest_batches(session: Session, tenant: str, limit: int, cursor: str | None) -> tuple[list[Batch], str | None]:
    """One page of the tenant's batches as newest_first reads it."""
    return newest_first(session, select(Batch).where(Batch.tenant == tenant), Batch, limit, cursor)


def _region_counts(session: Session, batch_id: str) -> Counts:
    done = func.coalesce(func.sum(case((Region.status != "pending", 1), else_=0)), 0)
    row = session.execute(select(done, func.count(Region.id)).join(Page, Region.page_id == Page.id)
                          .join(Document, Page.document_id == Document.id).where(Document.batch_id == batch_id)).one()
    return Counts(done=int(row[0]), total=int(row[1]))
