"""The CPU half of processing documents, as tasks: open a document, lay a page out, finish a page laid out elsewhere.

A PageWorker runs them one at a time, in a page worker process (page_pool.py) or in the caller's thread, and
returns plain data: what a document is (Opened), a page ready for the recognizer (PageWork: its draft output, the
crops of its regions for the model, cut to the model's grid where the checkpoint's image settings are known, and
its PNGs when a writer wants them), or a page rendered for a layout model that runs beside the engine (Rendered),
which comes back as a RegionsTask with the regions found on it. Nothing here imports torch: a worker starts in a
fraction of a second and holds only the documents it has open.

A document is opened (validated, counted, its running headers and footers found once) by one task, and each page is
its own task, so the pages of one large document spread over every worker; each worker keeps the last few
documents it touched open.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from pipeline.documents.errors import DocumentError
from pipeline.documents.layout import LayoutBackend, reads_pdf
from pipeline.documents.layout_contract import DetectedRegion
from pipeline.documents.layout_furniture import Furniture, document_furniture, remember_furniture
from pipeline.documents.page_images import PageImages, encode_page_images
from pipeline.documents.process import (
    FailedPage,
    LaidOutPage,
    PageDraft,
    ProcessOptions,
    finish_layout,
    lay_out,
    render_timed,
)
from pipeline.documents.regions import crop
from pipeline.documents.render import RenderedPage
from pipeline.documents.results import PageOutput, Problem
from pipeline.documents.source import IngestedDocument, SourcePage, ingest, sniff
from pipeline.documents.stages import open_document
from pipeline.engine.images import ImageError, ImageSettings, ModelImage, load_image, model_image

Source = Path | bytes  # a document's file, or its bytes (in this thread only: workers are given files)


@dataclass(frozen=True)
class OpenTask:
    doc: int
    source: Source


@dataclass(frozen=True)
class PageTask:
    doc: int
    source: Source
    index: int
    sha256: str
    furniture: Furniture | None  # found when the document was opened, so no worker looks at the whole PDF again


@dataclass(frozen=True)
class RegionsTask:
    """A page rendered by a worker and laid out beside the engine: finish it with the regions found on it."""

    doc: int
    source: Source
    page: RenderedPage
    found: list[DetectedRegion] | Problem
    timings_ms: dict[str, float]


PageWorkTask = OpenTask | PageTask | RegionsTask


@dataclass(frozen=True)
class Opened:
    """A document opened: what it is, or why it cannot be processed (then `error` is set and `page_count` is 0)."""

    doc: int
    sha256: str | None
    media_type: str | None
    size: int | None
    page_count: int = 0
    furniture: Furniture | None = None
    error: Problem | None = None
    ingest_ms: float = 0.0


@dataclass(frozen=True)
class Crop:
    """A region for the model: its position on the page's draft, its task, and its pixels (a ModelImage, or the
    crop itself when the checkpoint's image settings are unknown), or the problem that refused them."""

    region: int
    task: str
    pixels: ModelImage | Image.Image | None
    error: Problem | None = None


@dataclass
class PageWork:
    """A page ready for the recognizer (or failed, with nothing pending)."""

    doc: int
    draft: PageDraft
    crops: list[Crop] = field(default_factory=list)
    images: PageImages | None = None


@dataclass
class Rendered:
    """A page rendered for a layout model that runs in the engine's process."""

    doc: int
    page: RenderedPage
    render_ms: float


Result = Opened | PageWork | Rendered


class PageWorker:
    """Runs tasks with one layout backend and one set of options. `lays_out` False: the layout runs elsewhere (a
    model beside the engine), so a PageTask only renders; `layout` still names the pages finished with its regions.
    `image_settings`: the checkpoint's, to cut crops to the model's grid here; None sends the crops as they are."""

    def __init__(self, layout: LayoutBackend, lays_out: bool, options: ProcessOptions,
                 image_settings: ImageSettings | None = None, open_documents: int = 4) -> None:
        self.layout, self.lays_out, self.options = layout, lays_out, options
        self.image_settings = image_settings
        self._open: OrderedDict[int, IngestedDocument] = OrderedDict()
        self._limit = open_documents

    def run(self, task: PageWorkTask) -> Result:
        """The task's result; a task that raises fails its page (or document) alone, and the worker goes on."""
        try:
            if isinstance(task, OpenTask):
                return self._opened(task)
            if isinstance(task, PageTask):
                return self._page(task)
            source = SourcePage(self._document(task.doc, task.source), task.page.index)
            return self._work(task.doc, finish_layout(source, task.page, task.found, self.layout, task.timings_ms,
                                                      self.options.regions))
        except DocumentError as exc:  # the document no longer opens as it did (its file changed underneath)
            return failed_work(task, Problem(exc.code, exc.message))
        except Exception as exc:  # MuPDF, Pillow and the layout raise many types for damaged content
            return failed_work(task, Problem("corrupt", f"{type(exc).__name__}: {exc}"))

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def _opened(self, task: OpenTask) -> Opened:
        started = time.perf_counter()
        try:
            data = task.source if isinstance(task.source, bytes) else task.source.read_bytes()
        except OSError as exc:
            problem = Problem("unreadable", f"{task.source}: {exc.strerror or exc}")
            return Opened(task.doc, None, None, None, error=problem)
        try:
            document = open_document(data, self.options)
        except DocumentError as exc:
            error = Problem(exc.code, exc.message)
            return Opened(task.doc, hashlib.sha256(data).hexdigest(), sniff(data), len(data), error=error)
        self._keep(task.doc, document)
        furniture = document_furniture(document) if document.is_pdf and reads_pdf(self.layout) else None
        return Opened(task.doc, document.sha256, document.media_type, document.size, document.page_count, furniture,
                      ingest_ms=(time.perf_counter() - started) * 1000.0)

    def _page(self, task: PageTask) -> PageWork | Rendered:
        if task.furniture is not None:
            remember_furniture(task.sha256, task.furniture)
        source = SourcePage(self._document(task.doc, task.source), task.index)
        if self.lays_out:
            return self._work(task.doc, lay_out(source, self.layout, self.options.regions))
        rendered = render_timed(source)
        if isinstance(rendered, FailedPage):
            return self._work(task.doc, rendered)
        return Rendered(task.doc, *rendered)

    def _work(self, doc: int, laid_out: LaidOutPage | FailedPage) -> PageWork:
        margin = self.options.regions.crop_margin_pt
        if isinstance(laid_out, FailedPage):
            page = laid_out.page
            images = encode_page_images(page, [], margin) if page is not None and self.options.page_images else None
            return PageWork(doc, PageDraft(laid_out.output), images=images)
        draft = laid_out.draft()
        crops = [self._crop(laid_out, position) for position in draft.pending]
        images = encode_page_images(laid_out.page, draft.output.regions, margin) if self.options.page_images else None
        return PageWork(doc, draft, crops, images)

    def _crop(self, laid_out: LaidOutPage, position: int) -> Crop:
        item = laid_out.prepared[position]
        image = crop(laid_out.page, item.crop_box)
        if self.image_settings is None:
            return Crop(position, item.task, image)
        settings = self.image_settings.for_task(item.task)
        try:
            return Crop(position, item.task, model_image(load_image(image, settings.max_image_pixels), settings))
        except ImageError as exc:  # as the engine would refuse it: this region fails, with the engine's code
            return Crop(position, item.task, None, Problem(exc.code, str(exc)))

    def _document(self, doc: int, source: Source) -> IngestedDocument:
        document = self._open.get(doc)
        if document is None:
            data = source if isinstance(source, bytes) else source.read_bytes()
            document = ingest(data, self.options.limits, self.options.password)
            self._keep(doc, document)
        self._open.move_to_end(doc)
        return document

    def _keep(self, doc: int, document: IngestedDocument) -> None:
        self._open[doc] = document
        while len(self._open) > self._limit:
            self._open.popitem(last=False)[1].close()


def failed_work(task: PageWorkTask, problem: Problem) -> Opened | PageWork:
    """What a task comes to when it cannot be carried out (its worker died under it, say)."""
    if isinstance(task, OpenTask):
        return Opened(task.doc, None, None, None, error=problem)
    index = task.index if isinstance(task, PageTask) else task.page.index
    return PageWork(task.doc, PageDraft(PageOutput(index, "failed", error=problem)))
