"""The `recognize` stage, on a GPU worker: every pending region of one page through the resident engine, and the
page finished (then the document's last page sends finalize).

A page's regions are submitted together so they batch with other pages' regions in the engine; a tenant's crop seen
before under the same weights comes from the result cache instead. While the task waits, the process's cancel
watcher (cancel_watch.py) aborts its requests if the document is canceled.
"""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future, wait
from dataclasses import asdict, replace

from PIL import Image
from sqlalchemy import Connection, Row, select

from pipeline.db.models import Document, Page, Region
from pipeline.db.session import reading, session_scope
from pipeline.db.upserts import CropKey, recall_recognitions, remember_recognitions, upsert_regions
from pipeline.documents.process import page_problem, recognized_region
from pipeline.documents.recognizer import Recognition, RecognitionTask, Recognizer
from pipeline.documents.results import RegionContent, RegionOutput
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Send
from pipeline.jobs.rows import from_columns, region_output, region_row
from pipeline.jobs.stages.pages import OPEN_PAGE, finish_page, lock_document


def recognize_page(ctx: Context, page_id: int) -> list[Send]:
    """Recognise every pending region of one page at once (so they batch with other pages' regions) and store them."""
    if ctx.recognition is None:
        raise RuntimeError("recognize runs on a GPU worker: this process has no recognizer")
    with reading(ctx.db) as connection:
        read = _read_page(connection, page_id)
        if not read or read[0].document_status == "canceled":
            return []
        page, regions = read[0], [row for row in read if row.index is not None]
        if page.page_status != "processing":
            return _pass_on(page.page_status, page.document_id)
        pending = [region for region in regions if region.status == "pending"]
        image = _image(ctx, page.image_key)
        crops = [image.crop(tuple(region.crop_px)) for region in pending]
        revision = ctx.recognition.revision  # None without a model: nothing to recall, nothing to remember
        keys = [_crop_key(page.tenant, revision, region, crop)
                for region, crop in zip(pending, crops, strict=True)] if revision else []
        cached = recall_recognitions(connection, keys) if keys else [None] * len(pending)
    outputs = _recognize(ctx, page.tenant, crops, cached, pending, page.document_id)
    if outputs is None:  # canceled while the engine worked on it
        return []
    rows = [{**region_row(output, page_id, region.index, region.crop_px), "attempts": region.attempts + 1}
            for region, output in zip(pending, outputs, strict=True)]
    with session_scope(ctx.db) as session:
        if not lock_document(session, page.document_id):
            return []
        upsert_regions(session, rows)
        if keys:
            remember_recognitions(session, [(key, asdict(output.content)) for key, output
                                            in zip(keys, outputs, strict=True) if output.source == "model"])
        complete = finish_page(session, page_id, page.document_id,
                               page_problem(_page_outputs(regions, pending, outputs)), ctx.recognition.model)
    return [Send("finalize", page.document_id)] if complete else []


def _read_page(connection: Connection, page_id: int) -> list[Row]:
    """The page's state, image and document, once per region row (in the layout's order; one row with the region
    columns NULL for a page without regions); none when the page is gone. Plain rows in one statement: this runs
    once per page on the GPU worker, whose threads share the cores and the GIL with the engine loop, and round
    trips and mapped objects cost more there than the query. rows.region_output reads a region's columns by name."""
    return list(connection.execute(
        select(Page.status.label("page_status"), Page.document_id, Page.image_key, Document.tenant,
               Document.status.label("document_status"), *Region.__table__.c)
        .select_from(Page).join(Document).outerjoin(Region).where(Page.id == page_id).order_by(Region.index)))


def _page_outputs(regions: list[Row], pending: list[Row], outputs: list[RegionOutput]) -> list[RegionOutput]:
    """Every region of the page as it now stands: the ones final before this task as read, the rest as recognised."""
    recognized = {region.index: output for region, output in zip(pending, outputs, strict=True)}
    return [recognized[region.index] if region.index in recognized else region_output(region) for region in regions]


def _pass_on(state: str, document_id: str) -> list[Send]:
    """A re-delivered task for a page that has finished: send finalize again, which returns at once unless every
    page is done."""
    return [Send("finalize", document_id)] if state not in OPEN_PAGE else []


def _recognize(ctx: Context, tenant: str, crops: list[Image.Image], cached: list[Row | None], regions: list[Row],
               document_id: str) -> list[RegionOutput] | None:
    """Each region's output: its `cached` result where this tenant's crop was seen, else the recognizer's; None
    when the document was canceled meanwhile.

    Every miss is submitted before any is waited for, so the page's regions are in the engine together.
    """
    assert ctx.recognition is not None
    recognizer = ctx.recognition.recognizer(tenant)
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
            outputs.append(replace(base, source="cache", content=from_columns(RegionContent, hit)))
    return outputs


def _wait(ctx: Context, recognizer: Recognizer, futures: dict[int, Future[Recognition]], document_id: str) -> bool:
    """Wait for the futures; False when the document was canceled meanwhile (its requests are aborted then, and
    their futures resolve)."""
    if not futures:
        return True
    canceled = threading.Event()

    def abort() -> None:
        canceled.set()
        for future in futures.values():
            recognizer.cancel(future)

    with ctx.cancels.watching(document_id, abort):
        wait(futures.values())
    return not canceled.is_set()


def _crop_key(tenant: str, revision: str, region: Row, crop: Image.Image) -> CropKey:
    digest = hashlib.sha256(f"{crop.mode}:{crop.width}x{crop.height}:".encode())
    digest.update(crop.tobytes())
    return CropKey(tenant, revision, region.task or "ocr", digest.hexdigest())


def _image(ctx: Context, key: str | None) -> Image.Image:
    """The page image prepare left in memory when it ran this stage inline, else its stored PNG."""
    if key is None:
        raise RuntimeError("a page in `processing` has no image: prepare did not finish it")
    image = ctx.page_images.take(key)
    if image is None:
        with ctx.blobs.open(key) as blob:
            image = Image.open(blob)
            image.load()
    return image if image.mode == "RGB" else image.convert("RGB")
