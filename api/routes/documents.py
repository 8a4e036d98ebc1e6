"""/v1/documents: upload, status, results, pages, listing and deletion.

Uploads answer 202 with the new document, or 200 with the same body when the upload repeats an existing document
(an Idempotency-Key the tenant used before for the same request, or the same bytes with the same options).
Endpoints other than the upload are plain `def`s: FastAPI runs them on its thread pool, so their database and disk
work never blocks the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from typing import Annotated, BinaryIO, Literal

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from PIL import Image

from api.deps import ContextDep, TenantId
from api.errors import ApiError, error_responses
from api.queries import newest_documents, owned_document, owned_page
from api.schemas import DocumentAccepted, DocumentList, DocumentState, DocumentStatus, PageResult
from api.upload import form_options, receive_upload, upload_openapi
from api.views import document_accepted_view, document_status_view, document_summary_view, document_url, page_view
from pipeline.db.session import session_scope
from pipeline.documents.page_images import picture_png
from pipeline.jobs.cancel import NotCancelable, cancel_document
from pipeline.jobs.intake import IdempotencyConflict, accept_upload, delete_document
from pipeline.jobs.start import start_document
from pipeline.storage import BlobNotFound, BlobStore, read_chunks

router = APIRouter(prefix="/v1/documents", tags=["documents"])

READY = ("succeeded", "partial", "failed")  # the statuses with a result
RESULT_MEDIA_TYPES = {"json": "application/json", "markdown": "text/markdown; charset=utf-8"}


@router.post("", status_code=202, response_model=DocumentAccepted, openapi_extra=upload_openapi(),
             responses={200: {"model": DocumentAccepted, "description": "The upload repeats an existing document"},
                        **error_responses(400, 409, 413, 415, 422)})
async def create_document(
    request: Request, response: Response, ctx: ContextDep, tenant: TenantId,
    idempotency_key: Annotated[str | None, Header(max_length=256, description=(
        "Retry-safe uploads: the same key with the same request returns the first document (200); "
        "with a different file, name or options it is a 409 `idempotency_conflict`"))] = None,
) -> DocumentAccepted:
    """Upload a document for processing; answered once its bytes and row are durable."""
    upload = await receive_upload(request, ctx.blobs, ctx.settings.max_upload_bytes)
    try:
        options = form_options(upload.fields)
        # Shielded: a client that goes away must not leave a committed document that was never started.
        with anyio.CancelScope(shield=True):
            accepted = await anyio.to_thread.run_sync(partial(
                accept_upload, ctx.db, ctx.settings, tenant, upload.filename, upload.writer, options,
                idempotency_key))
            if accepted.created:
                await anyio.to_thread.run_sync(start_document, ctx.dispatcher, accepted.document.id)
    except IdempotencyConflict as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(upload.writer.abort)  # a no-op once accept_upload committed it
    document = accepted.document
    if not accepted.created:
        response.status_code = 200
    response.headers["Location"] = document_url(request, document.id)
    return document_accepted_view(request, document)


@router.get("", response_model=DocumentList, responses=error_responses(400, 422))
def list_documents(
    request: Request, ctx: ContextDep, tenant: TenantId, status: DocumentState | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
) -> DocumentList:
    """The tenant's documents, newest first."""
    with session_scope(ctx.db) as session:
        rows, next_cursor = newest_documents(session, tenant, status, limit, cursor)
        return DocumentList(items=[document_summary_view(request, row) for row in rows], next_cursor=next_cursor)


@router.get("/{document_id}", response_model=DocumentStatus, responses=error_responses(404, 422))
def get_document(request: Request, ctx: ContextDep, tenant: TenantId, document_id: str) -> DocumentStatus:
    """Status and progress."""
    with session_scope(ctx.db) as session:
        document = owned_document(session, tenant, document_id)
        return document_status_view(request, session, document)


@router.get("/{document_id}/result", response_class=StreamingResponse, responses={
    200: {"content": {media_type: {} for media_type in RESULT_MEDIA_TYPES.values()},
          "description": "The JSON (pipeline/documents/result.schema.json) or the Markdown"},
    **error_responses(404, 409, 422)})
def get_result(ctx: ContextDep, tenant: TenantId, document_id: str,
               format: Literal["json", "markdown"] = "json") -> StreamingResponse:
    """The finished document; 409 `not_ready` until it is succeeded, partial or failed."""
    with session_scope(ctx.db) as session:
        document = owned_document(session, tenant, document_id)
        status, key = document.status, document.result_key if format == "json" else document.markdown_key
    if status not in READY:
        raise ApiError(409, "not_ready", f"the document is {status}; a result exists once it has finished")
    missing = ApiError(404, "result_not_found", f"document {document_id} has no {format} result")
    return _blob_response(ctx.blobs, key, RESULT_MEDIA_TYPES[format], missing)


@router.get("/{document_id}/pages/{number}", response_model=PageResult, responses=error_responses(404, 422))
def get_page(request: Request, ctx: ContextDep, tenant: TenantId, document_id: str, number: int) -> PageResult:
    """Page `number`, counted from 1, with its regions as far as they are recognised."""
    with session_scope(ctx.db) as session:
        return page_view(request, owned_page(session, tenant, document_id, number))


@router.get("/{document_id}/pages/{number}/image", response_class=StreamingResponse,
            responses={200: {"content": {"image/png": {}}, "description": "The rendered page"},
                       **error_responses(404, 422)})
def get_page_image(ctx: ContextDep, tenant: TenantId, document_id: str, number: int) -> StreamingResponse:
    """The rendered page image (PNG); 404 `page_image_not_ready` until the page is rendered."""
    with session_scope(ctx.db) as session:
        key = owned_page(session, tenant, document_id, number).image_key
    missing = ApiError(404, "page_image_not_ready", f"page {number} of document {document_id} is not rendered yet")
    return _blob_response(ctx.blobs, key, "image/png", missing)


@router.get("/{document_id}/pages/{number}/regions/{order}/image", response_class=Response,
            responses={200: {"content": {"image/png": {}}, "description": "The region's crop"},
                       **error_responses(404, 422)})
def get_region_image(ctx: ContextDep, tenant: TenantId, document_id: str, number: int, order: int) -> Response:
    """The crop of the region whose `order` (as the page's JSON has it) this is, margin included (PNG): the pixels
    `quire process` saves for a picture and the model reads for any other region, so a picture in the Markdown and
    a reviewer's doubt about a region's text are both answered here. Cut from the page image when asked, not
    stored apart; 404 `region_not_found` for no such region, `region_image_not_found` for one with no pixels on
    the page."""
    with session_scope(ctx.db) as session:
        page = owned_page(session, tenant, document_id, number)
        region = next((region for region in page.regions if region.reading_order == order), None)
        if region is None:
            raise ApiError(404, "region_not_found", f"page {number} of document {document_id} has no region {order}")
        key, box = page.image_key, region.crop_px
    if key is None or box is None:
        raise ApiError(404, "region_image_not_found", f"region {order} of page {number} has no pixels on the page")
    try:
        with ctx.blobs.open(key) as handle, Image.open(handle) as image:
            return Response(picture_png(image.crop(tuple(box))), media_type="image/png")
    except BlobNotFound:
        raise ApiError(404, "region_image_not_found", f"page {number} of document {document_id} has no image") from None


@router.post("/{document_id}/cancel", response_model=DocumentStatus, responses=error_responses(404, 409, 422))
def cancel(request: Request, ctx: ContextDep, tenant: TenantId, document_id: str) -> DocumentStatus:
    """Stop the document's work: pages not started are skipped, its regions in the engine are aborted, and no
    result is written after this answers. Canceling a canceled document is fine; a finished one is a 409."""
    try:
        document = cancel_document(ctx.db, ctx.dispatcher, tenant, document_id)
    except NotCancelable as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    if document is None:
        raise ApiError(404, "document_not_found", f"no document {document_id}")
    with session_scope(ctx.db) as session:
        document = owned_document(session, tenant, document_id)
        return document_status_view(request, session, document)


@router.delete("/{document_id}", status_code=204, response_class=Response, responses=error_responses(404, 422))
def remove_document(ctx: ContextDep, tenant: TenantId, document_id: str) -> Response:
    """Delete the document, its pages and results, and its blobs that no other document shares."""
    if not delete_document(ctx.db, ctx.blobs, tenant, document_id):
        raise ApiError(404, "document_not_found", f"no document {document_id}")
    return Response(status_code=204)


def _blob_response(blobs: BlobStore, key: str | None, media_type: str, missing: ApiError) -> StreamingResponse:
    """The blob streamed from the store; its key (a content hash) is a strong ETag."""
    if key is None:
        raise missing
    try:
        handle = blobs.open(key)
    except BlobNotFound:
        raise missing from None
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    headers = {"Content-Length": str(size), "ETag": f'"{key}"'}
    return StreamingResponse(_chunks(handle), media_type=media_type, headers=headers)


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        yield from read_chunks(handle)
