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
from sqlalchemy.orm import joinedload

from pipeline.db.models import Page, Region
from pipeline.db.session import session_scope
from pipeline.db.upserts import CropKey, recall_recognitions, remember_recognitions, upsert_regions
from pipeline.documents.process import page_problem, recognized_region
from pipeline.documents.recognize import Recognition, RecognitionTask, Recognizer
from pipeline.documents.results import RegionContent, RegionOutput
from pipeline.jobs.context import Context
from pipeline.jobs.handoff import hand_off
from pipeline.jobs.pages import OPEN_PAGE, finish_page, wanted
from pipeline.jobs.rows import from_columns, region_output, region_row


def recognize_page(ctx: Context, page_id: int) -> None:
    """Recognise every pending region of one page at once (so they batch with other pages' regions) and store them."""
    if ctx.recognition is None:
        raise RuntimeError("recognize runs on a GPU worker: this process has no recognizer")
    with session_scope(ctx.db) as session:
        page = session.get(Page, page_id, options=[joinedload(Page.document), joinedload(Page.regions)])
        if page is None or page.document.status == "canceled":
            return
        state, document_id, tenant, image_key = page.status, page.document_id, page.document.tenant, page.image_key
        regions = list(page.regions)
        pending = [region for region in regions if region.status == "pending"]
    if state != "processing":
        _pass_on(ctx, state, document_id)
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
        document = wanted(session, document_id)
        if document is None:
            return
        upsert_regions(session, rows)
        remember_recognitions(session, [(key, asdict(output.content))
                                        for key, output in zip(keys, outputs, strict=True) if output.source == "model"])
        document.model = ctx.recognition.model
        complete = finish_page(session, page_id, document_id, page_problem(_page_outputs(regions, pending, outputs)))
    if complete:
        hand_off(ctx.dispatcher, "recognize", "finalize", document_id)


def _page_outputs(regions: list[Region], pending: list[Region], outputs: list[RegionOutput]) -> list[RegionOutput]:
    """Every region of the page as it now stands: the ones final before this task as read, the rest as recognised."""
    recognized = {region.index: output for region, output in zip(pending, outputs, strict=True)}
    return [recognized[region.index] if region.index in recognized else region_output(region) for region in regions]


def _pass_on(ctx: Context, state: str, document_id: str) -> None:
    """A re-delivered task for a page that has finished: send finalize again, which returns at once unless every
    page is done."""
    if state not in OPEN_PAGE:
        hand_off(ctx.dispatcher, "recognize", "finalize", document_id)


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


def _crop_key(ctx: Context, tenant: str, region: Region, crop: Image.Image) -> CropKey:
    assert ctx.recognition is not None
    digest = hashlib.sha256(f"{crop.mode}:{crop.width}x{crop.height}:".encode())
    digest.update(crop.tobytes())
    return CropKey(tenant, ctx.recognition.revision, region.task or "ocr", digest.hexdigest())


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
