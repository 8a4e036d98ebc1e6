"""The four stages of a document in the service: ingest → prepare (per page) → recognize (per page) → finalize.

Every stage may run twice (tasks ack late and are re-delivered when a worker dies) and concurrently with its
siblings, so each one reads its state from the database first and does only what is still to do: a page that
is past a stage is passed on, not redone, and results are upserts keyed by (page, region index). Work happens
outside transactions; each transaction is short, and the next stage is sent only after it has committed. A
document deleted while it is worked on simply ends its remaining tasks: each finds its rows gone and returns.

A page reaches its final state in `_finish_page`, whose conditional update succeeds once per page; that
transaction also counts the page on its document, so exactly one page — the last — sends finalize, however the
pages interleave across workers.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import replace
from typing import Any

from PIL import Image
from sqlalchemy import select, update
from sqlalchemy.orm import Session, selectinload

from pipeline.db.models import Document, Page, Region, utcnow
from pipeline.db.session import session_scope
from pipeline.db.upserts import CropKey, insert_pages, recall_recognitions, remember_recognitions, upsert_regions
from pipeline.documents.assemble import document_json, document_markdown
from pipeline.documents.errors import DocumentError
from pipeline.documents.ingest import SourcePage, ingest, sniff
from pipeline.documents.layout_weights import LayoutModelUnavailable
from pipeline.documents.process import (
    FinishedPage,
    LaidOutPage,
    ProcessOptions,
    document_status,
    lay_out,
    page_problem,
    recognized_region,
)
from pipeline.documents.recognize import Recognition, RecognitionTask, Recognizer
from pipeline.documents.results import PageOutput, Problem, RegionOutput
from pipeline.jobs.context import Context
from pipeline.jobs.deliveries import deliver
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.events import announce_document, send_deliveries
from pipeline.jobs.intake import lock_blobs
from pipeline.jobs.options import DocumentOptions
from pipeline.jobs.rows import document_output, page_output, region_output, region_row

log = logging.getLogger("quire.stages")
FINAL_DOCUMENT = ("succeeded", "partial", "failed", "canceled")
OPEN_PAGE = ("queued", "processing")
KEY_FIELDS = {"ingest": "document_id", "prepare": "page_id", "recognize": "page_id", "finalize": "document_id"}
CANCEL_POLL_S = 0.5  # how often a recognize task waiting on the engine looks for a cancel


def ingest_document(ctx: Context, document_id: str) -> None:
    """Open the upload, count its pages, add a row per page and send each page on; bad input fails the document."""
    with session_scope(ctx.db) as session:
        document = session.get(Document, document_id)
        if document is None or document.status in FINAL_DOCUMENT:
            return
        if document.status == "queued":
            document.status, document.started_at = "processing", utcnow()
        sha256, options = document.sha256, _options(ctx, document)
    started = time.perf_counter()
    data = ctx.blobs.get(sha256)
    try:
        with ingest(data, options.limits, options.password) as opened:
            page_count, media_type = opened.page_count, opened.media_type
    except DocumentError as exc:
        _fail_document(ctx, document_id, sniff(data), Problem(exc.code, exc.message))
        return
    with session_scope(ctx.db) as session:
        document = _wanted(session, document_id)
        if document is None:
            return
        document.page_count, document.media_type = page_count, media_type
        document.timings = {**document.timings, "ingest": (time.perf_counter() - started) * 1000.0}
        insert_pages(session, document_id, page_count)
    _send_open_pages(ctx, document_id)


def prepare_page(ctx: Context, page_id: int) -> None:
    """Render and lay out one page, store its image and one row per region; regions for the model go on to recognize."""
    with session_scope(ctx.db) as session:
        page = session.get(Page, page_id)
        if page is None or page.document.status == "canceled":
            return
        state, index, document = page.status, page.index, page.document
        sha256, options = document.sha256, _options(ctx, document)
    if state != "queued":
        _pass_on(ctx, page_id, state, document.id)
        return
    laid_out = _lay_out(ctx, sha256, index, options, document.options["layout"])
    if isinstance(laid_out, FinishedPage):
        _finish_failed_page(ctx, page_id, laid_out.output)
        return
    png = _png(laid_out.page.image)
    image_key = ctx.blobs.put(png)
    outputs = [laid_out.region_output(i) for i in range(len(laid_out.prepared))]
    rows = [region_row(output, page_id, i, item.crop_box, pending=item.needs_model)
            for i, (item, output) in enumerate(zip(laid_out.prepared, outputs, strict=True))]
    pending = any(item.needs_model for item in laid_out.prepared)
    with session_scope(ctx.db) as session:
        if _wanted(session, document.id) is None:
            return
        page = session.get_one(Page, page_id)
        _keep_blobs(session, ctx, {image_key: png})
        upsert_regions(session, rows)
        _describe(page, laid_out, image_key)
        page.status = "processing"
        complete = False if pending else _finish_page(session, page_id, document.id, page_problem(outputs))
    if pending:
        ctx.dispatcher.send("recognize", page_id)
    elif complete:
        ctx.dispatcher.send("finalize", document.id)


def recognize_page(ctx: Context, page_id: int) -> None:
    """Recognise every pending region of one page at once (so they batch with other pages' regions) and store them."""
    if ctx.recognition is None:
        raise RuntimeError("recognize runs on a GPU worker: this process has no recognizer")
    with session_scope(ctx.db) as session:
        page = session.get(Page, page_id)
        if page is None or page.document.status == "canceled":
            return
        state, document_id, tenant, image_key = page.status, page.document_id, page.document.tenant, page.image_key
        pending = [region for region in page.regions if region.status == "pending"]
    if state != "processing":
        _pass_on(ctx, page_id, state, document_id)
        return
    image = _image(ctx, image_key)
    crops = [image.crop(tuple(region.crop_px)) for region in pending]
    keys = [_crop_key(ctx, tenant, region, crop) for region, crop in zip(pending, crops, strict=True)]
    outputs = _recognize(ctx, tenant, crops, keys, pending, document_id)
    if outputs is None:  # canceled while the engine worked on it
        return
    rows = [{**region_row(output, page_id, region.index, region.crop_px), "attempts": region.attempts + 1}
            for region, output in zip(pending, outputs, strict=True)]
    with session_scope(ctx.db) as session:
        document = _wanted(session, document_id)
        if document is None:
            return
        upsert_regions(session, rows)
        remember_recognitions(session, [(key, {"text": output.text, "html": output.html, "latex": output.latex,
                                               "finish_reason": output.finish_reason, "truncated": output.truncated})
                                        for key, output in zip(keys, outputs, strict=True) if output.source == "model"])
        document.model = ctx.recognition.model
        regions = [region_output(region) for region in session.get_one(Page, page_id).regions]
        complete = _finish_page(session, page_id, document_id, page_problem(regions))
    if complete:
        ctx.dispatcher.send("finalize", document_id)


def finalize_document(ctx: Context, document_id: str) -> None:
    """Assemble the Markdown and JSON from the rows, store them, and set the document's final status once."""
    with session_scope(ctx.db) as session:
        document = session.scalars(select(Document).where(Document.id == document_id).options(
            selectinload(Document.pages).selectinload(Page.regions))).one_or_none()
        if document is None or document.status != "processing" or document.pages_done < (document.page_count or 0):
            return
        pages = [page_output(page) for page in document.pages]
        status = "failed" if document.error_code else document_status(pages)
        finished = utcnow()
        timings = {**document.timings, "total": (finished - document.created_at).total_seconds() * 1000.0}
        output = replace(document_output(document, status), timings_ms=timings)  # written once, with the status
    results = {"json": _json_bytes(document_json(output)), "markdown": document_markdown(output).encode()}
    result_key, markdown_key = ctx.blobs.put(results["json"]), ctx.blobs.put(results["markdown"])
    with session_scope(ctx.db) as session:
        _keep_blobs(session, ctx, {result_key: results["json"], markdown_key: results["markdown"]})
        options = {key: value for key, value in document.options.items() if key != "password"}
        finished_now = session.execute(update(Document).where(
            Document.id == document_id, Document.status == "processing").values(
            status=status, result_key=result_key, markdown_key=markdown_key, finished_at=finished,
            timings=timings, options=options, updated_at=finished)).rowcount == 1
        announced = announce_document(session, document_id) if finished_now else []  # its events, recorded once
    send_deliveries(ctx.dispatcher, announced)


def _options(ctx: Context, document: Document) -> ProcessOptions:
    return DocumentOptions(**document.options).process_options(ctx.settings)


def _send_open_pages(ctx: Context, document_id: str) -> None:
    """prepare every page not yet finished (prepare passes a page that is further along to its next stage)."""
    with session_scope(ctx.db) as session:
        open_pages = session.scalars(select(Page.id).where(Page.document_id == document_id,
                                                           Page.status.in_(OPEN_PAGE)).order_by(Page.index)).all()
        document = session.get(Document, document_id)
        if document is None:
            return
        complete = document.pages_done >= (document.page_count or 0)
    for page_id in open_pages:
        ctx.dispatcher.send("prepare", page_id)
    if not open_pages and complete:  # a re-delivered ingest after every page finished
        ctx.dispatcher.send("finalize", document_id)


def _pass_on(ctx: Context, page_id: int, state: str, document_id: str) -> None:
    """A re-delivered task for a page that has moved on: send the page's next stage again, which is idempotent."""
    if state == "processing":
        ctx.dispatcher.send("recognize", page_id)
    elif state not in OPEN_PAGE:
        ctx.dispatcher.send("finalize", document_id)  # finalize returns at once unless every page is done


def _lay_out(ctx: Context, sha256: str, index: int, options: ProcessOptions, layout: str) -> LaidOutPage | FinishedPage:
    """lay_out on page `index`, reopening the upload (each page task may run on another machine)."""
    try:
        backend = ctx.layout(layout)
        with ingest(ctx.blobs.get(sha256), options.limits, options.password) as opened:
            return lay_out(SourcePage(opened, index), backend, options.regions)
    except DocumentError as exc:
        return _failed(index, Problem(exc.code, exc.message))
    except LayoutModelUnavailable as exc:
        return _failed(index, Problem("layout_model_unavailable", str(exc)))


def _failed(index: int, problem: Problem) -> FinishedPage:
    return FinishedPage(PageOutput(index, "failed", error=problem), None, 0)


def _describe(page: Page, laid_out: LaidOutPage, image_key: str) -> None:
    rendered = laid_out.page
    page.width_px, page.height_px, page.dpi, page.rotation = (rendered.width_px, rendered.height_px, rendered.dpi,
                                                              rendered.rotation)
    page.width_pt, page.height_pt = rendered.width_pt, rendered.height_pt
    page.image_key, page.layout, page.timings = image_key, laid_out.layout, laid_out.timings_ms
    page.layout_reason = laid_out.layout_reason


def _finish_failed_page(ctx: Context, page_id: int, output: PageOutput) -> None:
    with session_scope(ctx.db) as session:
        page = session.get(Page, page_id)
        if page is None or _wanted(session, page.document_id) is None:
            return
        page.layout, page.layout_reason, page.timings = output.layout, output.layout_reason, output.timings_ms
        page.width_px, page.height_px, page.dpi = output.width_px, output.height_px, output.dpi
        page.width_pt, page.height_pt, page.rotation = output.width_pt, output.height_pt, output.rotation
        document_id = page.document_id
        complete = _finish_page(session, page_id, document_id, output.error)
    if complete:
        ctx.dispatcher.send("finalize", document_id)


def _finish_page(session: Session, page_id: int, document_id: str, problem: Problem | None) -> bool:
    """Move an open page to its final state and count it; True when it was the document's last page."""
    moved = session.execute(update(Page).where(Page.id == page_id, Page.status.in_(OPEN_PAGE)).values(
        status="failed" if problem else "succeeded", error_code=problem.code if problem else None,
        error_message=problem.message if problem else None, updated_at=utcnow()))
    if moved.rowcount != 1:  # finished by an earlier delivery of this task
        return False
    done, total = session.execute(update(Document).where(Document.id == document_id)
                                  .values(pages_done=Document.pages_done + 1)
                                  .returning(Document.pages_done, Document.page_count)).one()
    return done >= (total or 0)


def _fail_document(ctx: Context, document_id: str, media_type: str | None, problem: Problem) -> None:
    with session_scope(ctx.db) as session:
        document = _wanted(session, document_id)
        if document is None:
            return
        document.error_code, document.error_message = problem.code, problem.message
        document.media_type, document.page_count = media_type, 0
    ctx.dispatcher.send("finalize", document_id)


def _recognize(ctx: Context, tenant: str, crops: list[Image.Image], keys: list[CropKey], regions: list[Region],
               document_id: str) -> list[RegionOutput] | None:
    """Each region's output: from the result cache when this tenant's crop was seen, else from the recognizer;
    None when the document was canceled meanwhile.

    Every miss is submitted before any is waited for, so the page's regions are in the engine together.
    """
    assert ctx.recognition is not None
    recognizer = ctx.recognition.recognizer(tenant)
    with session_scope(ctx.db) as session:
        cached = recall_recognitions(session, keys)
    futures: dict[int, Future[Recognition]] = {
        i: recognizer.submit(RecognitionTask(crop, region.task or "ocr", f"page{region.page_id}-region{region.index}"))
        for i, (region, crop, hit) in enumerate(zip(regions, crops, cached, strict=True)) if hit is None}
    if not _wait(ctx, recognizer, futures, document_id):
        return None
    outputs = []
    for i, (region, hit) in enumerate(zip(regions, cached, strict=True)):
        base = region_output(region)
        if hit is None:
            outputs.append(recognized_region(base, futures[i].result()))
        else:
            outputs.append(replace(base, source="cache", text=hit.text, html=hit.html, latex=hit.latex,
                                   finish_reason=hit.finish_reason, truncated=hit.truncated))
    return outputs


def _wait(ctx: Context, recognizer: Recognizer, futures: dict[int, Future[Recognition]], document_id: str) -> bool:
    """Wait for the futures, looking at the document every CANCEL_POLL_S; on a cancel, abort them and say False."""
    waiting = set(futures.values())
    while waiting:
        _, waiting = wait(waiting, timeout=CANCEL_POLL_S)
        if waiting and _canceled(ctx, document_id):
            for future in waiting:
                recognizer.cancel(future)
            return False
    return True


def _canceled(ctx: Context, document_id: str) -> bool:
    with session_scope(ctx.db) as session:
        status = session.scalars(select(Document.status).where(Document.id == document_id)).one_or_none()
    return status in (None, "canceled")


def _wanted(session: Session, document_id: str) -> Document | None:
    """The document, row-locked until the transaction ends, unless it was deleted or canceled: then None, and the
    caller writes nothing (cancel takes the same lock, so nothing is written after a cancel commits)."""
    document = session.scalars(select(Document).where(Document.id == document_id).with_for_update()).one_or_none()
    return None if document is None or document.status == "canceled" else document


def _crop_key(ctx: Context, tenant: str, region: Region, crop: Image.Image) -> CropKey:
    assert ctx.recognition is not None
    digest = hashlib.sha256(f"{crop.mode}:{crop.width}x{crop.height}:".encode())
    digest.update(crop.tobytes())
    return CropKey(tenant, ctx.recognition.revision, region.task or "ocr", digest.hexdigest())


def _keep_blobs(session: Session, ctx: Context, blobs: dict[str, bytes]) -> None:
    """Blobs are shared by content: a delete of another document may have removed one of these since it was put.
    Under the blob locks (held until this transaction that records the keys commits), put back any that went."""
    lock_blobs(session, sorted(blobs))
    for key, data in blobs.items():
        if not ctx.blobs.exists(key):
            ctx.blobs.put(data)


def _png(image: Image.Image) -> bytes:
    """The page image, lossless (the crops the GPU worker cuts must be the pixels layout saw); fast compression."""
    buffer = io.BytesIO()
    image.save(buffer, "PNG", compress_level=1)
    return buffer.getvalue()


def _image(ctx: Context, key: str | None) -> Image.Image:
    if key is None:
        raise RuntimeError("a page in `processing` has no image: prepare did not finish it")
    with ctx.blobs.open(key) as blob:
        image = Image.open(blob)
        image.load()
    return image.convert("RGB")


def _json_bytes(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode()




def run_stage(ctx: Context, stage: Stage, key: str | int) -> None:
    """Run one stage and log it with its document or page id, its duration and how it ended (the one place both
    the Celery tasks and the embedded workers go through)."""
    fields: dict[str, Any] = {"stage": stage, KEY_FIELDS.get(stage, "key"): key}
    started = time.perf_counter()
    try:
        STAGES[stage](ctx, key)
    except Exception as exc:
        code = getattr(exc, "code", None)  # a typed error (a checkpoint that does not load): its code, no traceback
        coded = {"code": code} if code else {}
        log.warning("%s %s raised: %s", stage, key, exc, exc_info=code is None,
                    extra={**fields, "outcome": "raised", "duration_ms": _since(started), **coded})
        raise
    log.info("%s %s done", stage, key, extra={**fields, "outcome": "done", "duration_ms": _since(started)})


def _since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)


STAGES: dict[Stage, Callable[[Context, Any], None]] = {
    "ingest": ingest_document, "prepare": prepare_page, "recognize": recognize_page, "finalize": finalize_document,
    "deliver": deliver}
