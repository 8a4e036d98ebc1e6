"""/v1/batches: many documents in one request (several files, or one zip or tar archive of them), one progress.

A batch answers 202 once every document of it is durable, listing the files taken and those rejected (not a
document Quire reads, empty, too large, encrypted); it answers 422 with nothing kept when its archive is refused
whole (a bomb, too many members, too large, an unsafe name or member type, damaged; see pipeline/archives.py) or
when no file of it is a document.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request, Response

from api.batch_upload import BatchForm, batch_openapi
from api.batch_views import (
    BatchAccepted,
    BatchList,
    BatchStatus,
    batch_accepted_view,
    batch_status_view,
    batch_summary_view,
    batch_url,
    newest_batches,
    owned_batch,
)
from api.deps import ContextDep, TenantId
from api.errors import ApiError, error_responses
from api.upload import form_options, receive_form
from pipeline.archives import ArchiveRefused
from pipeline.db.session import session_scope
from pipeline.jobs.batches import NoDocuments, accept_batch
from pipeline.jobs.start import start_batch

router = APIRouter(prefix="/v1/batches", tags=["batches"])


@router.post("", status_code=202, response_model=BatchAccepted, openapi_extra=batch_openapi(),
             responses=error_responses(400, 413, 422))
async def create_batch(request: Request, response: Response, ctx: ContextDep, tenant: TenantId) -> BatchAccepted:
    """Upload several documents, or one archive of them, as one batch; answered once all of it is durable."""
    settings = ctx.settings
    received = await receive_form(request, BatchForm(ctx.blobs, settings), settings.max_archive_bytes)
    try:
        options = form_options(received.fields)
        # Shielded: a client that goes away must not leave committed documents that were never started.
        with anyio.CancelScope(shield=True):
            accepted = await anyio.to_thread.run_sync(partial(
                accept_batch, ctx.db, ctx.blobs, settings, tenant, received.upload, options))
            await anyio.to_thread.run_sync(start_batch, ctx.dispatcher, accepted)
    except (ArchiveRefused, NoDocuments) as exc:
        raise ApiError(422, exc.code, str(exc)) from None
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(received.upload.close)  # what was not accepted
    response.headers["Location"] = batch_url(request, accepted.batch.id)
    return batch_accepted_view(request, accepted)


@router.get("", response_model=BatchList, responses=error_responses(400, 422))
def list_batches(
    request: Request, ctx: ContextDep, tenant: TenantId, limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
) -> BatchList:
    """The tenant's batches, newest first."""
    with session_scope(ctx.db) as session:
        rows, next_cursor = newest_batches(session, tenant, limit, cursor)
        return BatchList(items=[batch_summary_view(request, row) for row in rows], next_cursor=next_cursor)


@router.get("/{batch_id}", response_model=BatchStatus, responses=error_responses(404, 422))
def get_batch(request: Request, ctx: ContextDep, tenant: TenantId, batch_id: str) -> BatchStatus:
    """The batch's documents by status, their pages and regions summed, and the files it rejected."""
    with session_scope(ctx.db) as session:
        return batch_status_view(request, session, owned_batch(session, tenant, batch_id))
