"""The `prepare` stage: render and lay out one page, then send it to recognize, or finish it when no region of it
needs the model (then the document's last page sends finalize).

Each page is its own task, which may run on another machine than its document's ingest, so it reopens the upload.
"""

from __future__ import annotations

from sqlalchemy import Connection, Row, select, update

from pipeline.db.models import Document, Page
from pipeline.db.session import reading, session_scope
from pipeline.db.upserts import upsert_regions
from pipeline.documents.errors import DocumentError
from pipeline.documents.layout_weights import LayoutModelUnavailable
from pipeline.documents.page_images import page_png
from pipeline.documents.process import FailedPage, LaidOutPage, ProcessOptions, lay_out, page_problem
from pipeline.documents.results import PageOutput, Problem
from pipeline.documents.source import SourcePage, ingest
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Send
from pipeline.jobs.rows import region_row
from pipeline.jobs.stages.pages import OPEN_PAGE, finish_page, keep_blobs, lock_document, stored_options


def prepare_page(ctx: Context, page_id: int) -> list[Send]:
    """Render and lay out one page, store its image and one row per region; regions for the model go on to recognize
    (with the page image, which recognize crops instead of the stored PNG when it runs in this thread)."""
    with reading(ctx.db) as connection:
        page = _read_page(connection, page_id)
    if page is None or page.document_status == "canceled":
        return []
    if page.status != "queued":
        return _pass_on(page_id, page.status, page.document_id)
    laid_out = _lay_out(ctx, page.sha256, page.index, stored_options(ctx, page.options), page.options["layout"])
    if isinstance(laid_out, FailedPage):
        return _finish_failed_page(ctx, page_id, laid_out.output)
    png = page_png(laid_out.page.image)  # lossless: the crops the GPU worker cuts must be the pixels layout saw
    image_key = ctx.blobs.put(png)
    outputs = laid_out.draft().output.regions  # those for the model without content: recognize fills them in
    rows = [region_row(output, page_id, i, item.crop_box, pending=item.needs_model)
            for i, (item, output) in enumerate(zip(laid_out.prepared, outputs, strict=True))]
    pending = any(item.needs_model for item in laid_out.prepared)
    with session_scope(ctx.db) as session:
        if not lock_document(session, page.document_id):
            return []
        keep_blobs(session, ctx, {image_key: png})
        upsert_regions(session, rows)
        session.execute(update(Page).where(Page.id == page_id).values(status="processing",
                                                                      **_description(laid_out, image_key)))
        complete = False if pending else finish_page(session, page_id, page.document_id, page_problem(outputs))
    if pending:
        return [Send("recognize", page_id, image=(image_key, laid_out.page.image))]
    return [Send("finalize", page.document_id)] if complete else []


def _read_page(connection: Connection, page_id: int) -> Row | None:
    """The page's state and what laying it out needs of its document, as plain columns in one statement."""
    return connection.execute(select(Page.status, Page.index, Page.document_id, Document.sha256, Document.options,
                                     Document.status.label("document_status"))
                              .join(Document).where(Page.id == page_id)).one_or_none()


def _pass_on(page_id: int, state: str, document_id: str) -> list[Send]:
    """A re-delivered task for a page that has moved on: send the page's next stage again, which is idempotent."""
    if state == "processing":
        return [Send("recognize", page_id)]
    if state not in OPEN_PAGE:
        return [Send("finalize", document_id)]  # returns at once unless every page is done
    return []


def _lay_out(ctx: Context, sha256: str, index: int, options: ProcessOptions, layout: str) -> LaidOutPage | FailedPage:
    """lay_out on page `index`, reopening the upload (each page task may run on another machine)."""
    try:
        backend = ctx.layout(layout)
        with ingest(ctx.blobs.get(sha256), options.limits, options.password) as opened:
            return lay_out(SourcePage(opened, index), backend, options.regions)
    except DocumentError as exc:
        return _failed(index, Problem(exc.code, exc.message))
    except LayoutModelUnavailable as exc:
        return _failed(index, Problem("layout_model_unavailable", str(exc)))


def _failed(index: int, problem: Problem) -> FailedPage:
    return FailedPage(PageOutput(index, "failed", error=problem))


def _description(laid_out: LaidOutPage, image_key: str) -> dict[str, object]:
    """The page row's columns that the rendered and laid-out page fills in."""
    rendered = laid_out.page
    return {"width_px": rendered.width_px, "height_px": rendered.height_px, "dpi": rendered.dpi,
            "rotation": rendered.rotation, "width_pt": rendered.width_pt, "height_pt": rendered.height_pt,
            "image_key": image_key, "layout": laid_out.layout, "timings": laid_out.timings_ms,
            "layout_reason": laid_out.layout_reason}


def _finish_failed_page(ctx: Context, page_id: int, output: PageOutput) -> list[Send]:
    with session_scope(ctx.db) as session:
        page = session.get(Page, page_id)
        if page is None or not lock_document(session, page.document_id):
            return []
        page.layout, page.layout_reason, page.timings = output.layout, output.layout_reason, output.timings_ms
        page.width_px, page.height_px, page.dpi = output.width_px, output.height_px, output.dpi
        page.width_pt, page.height_pt, page.rotation = output.width_pt, output.height_pt, output.rotation
        document_id = page.document_id
        complete = finish_page(session, page_id, document_id, output.error)
    return [Send("finalize", document_id)] if complete else []
