"""Run one document through the whole pipeline: ingest → render → layout → regions → recognize → results.

Pages stream through a window: while the recognizer works on the regions of the pages in flight, the next pages
are rendered and laid out on this thread, so CPU stages and the engine overlap and the engine always has many
regions (of many pages) to batch. Pages are laid out `layout_batch` at a time, in one forward pass of a layout
model. The window also bounds memory: only `pages_in_flight` page images (and a batch being laid out) are held.

Bad input never raises: an unreadable or refused document comes back `failed` with its error code, a page that
cannot be rendered, laid out or recognised comes back `failed` with its code and its document `partial`.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline.documents.errors import DocumentError
from pipeline.documents.ingest import IngestedDocument, Limits, SourcePage, ingest, sniff
from pipeline.documents.layout import LayoutBackend, detect_many
from pipeline.documents.layout_choice import choose_layout
from pipeline.documents.layout_contract import DetectedRegion, LaidPage
from pipeline.documents.page_ranges import PageRanges
from pipeline.documents.postprocess import postprocess
from pipeline.documents.recognize import Recognition, RecognitionTask, Recognizer
from pipeline.documents.regions import PreparedRegion, RegionOptions, crop, prepare_regions
from pipeline.documents.render import RenderedPage, render_page_result
from pipeline.documents.results import (
    DocumentOutcome,
    DocumentOutput,
    PageOutput,
    Problem,
    RegionContent,
    RegionOutput,
)


@dataclass(frozen=True)
class ProcessOptions:
    limits: Limits = field(default_factory=Limits)
    regions: RegionOptions = field(default_factory=RegionOptions)
    password: str | None = None
    pages_in_flight: int = 16  # pages rendered and submitted ahead of the oldest unfinished one
    layout_batch: int = 8  # pages laid out together (at most pages_in_flight): one forward pass of a layout model
    pages: PageRanges | None = None  # only these pages (None: all); pages past the end are not there to take


@dataclass(frozen=True)
class FinishedPage:
    """A page as it leaves the pipeline, with its image (None if it did not render) for callers that save it."""

    output: PageOutput
    image: RenderedPage | None
    page_count: int


PageCallback = Callable[[FinishedPage], None]


@dataclass
class LaidOutPage:
    """A rendered page with its regions prepared: the work between layout and recognition."""

    source_index: int
    page: RenderedPage
    layout: str
    prepared: list[PreparedRegion]
    timings_ms: dict[str, float]
    layout_reason: str | None = None

    def region_output(self, index: int, recognition: Recognition | None = None) -> RegionOutput:
        """Region `index` as output: final unless it needs the model, then with `recognition`'s content."""
        return _region_output(self.page, self.prepared[index], recognition)


@dataclass
class _InFlight:
    """A page whose regions are with the recognizer."""

    laid_out: LaidOutPage
    futures: dict[int, Future[Recognition]]


def process_file(path: Path, recognizer: Recognizer, layout: LayoutBackend, options: ProcessOptions | None = None,
                 on_page: PageCallback | None = None, model: str | None = None) -> DocumentOutput:
    """process_document on a file's bytes; a file that cannot be read is a failed document (`unreadable`)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return DocumentOutput(path.name, "failed", error=Problem("unreadable", f"{path}: {exc.strerror or exc}"),
                              model=model)
    return process_document(data, path.name, recognizer, layout, options, on_page, model)


def process_document(data: bytes, name: str, recognizer: Recognizer, layout: LayoutBackend,
                     options: ProcessOptions | None = None, on_page: PageCallback | None = None,
                     model: str | None = None) -> DocumentOutput:
    """Every page of one document, recognised; `on_page` sees each finished page in order, with its image."""
    options = options or ProcessOptions()
    started = time.perf_counter()
    try:
        document = ingest(data, options.limits, options.password)
    except DocumentError as exc:
        return DocumentOutput(name, "failed", sha256=hashlib.sha256(data).hexdigest(), media_type=sniff(data),
                              size_bytes=len(data), error=Problem(exc.code, exc.message), model=model)
    ingested = time.perf_counter()
    with document:
        if options.pages is not None and options.pages.first() > document.page_count:
            return DocumentOutput(name, "failed", sha256=document.sha256, media_type=document.media_type,
                                  size_bytes=document.size, model=model, error=_out_of_range(options.pages, document))
        pages = _run_pages(document, recognizer, layout, options, on_page)
    timings = {"ingest": (ingested - started) * 1000.0, "total": (time.perf_counter() - started) * 1000.0}
    return DocumentOutput(name, document_status(pages), sha256=document.sha256, media_type=document.media_type,
                          size_bytes=document.size, pages=pages, model=model, timings_ms=timings)


def _out_of_range(pages: PageRanges, document: IngestedDocument) -> Problem:
    return Problem("pages_out_of_range", f"pages {pages.text} asked for; the document has {document.page_count}")


def expand_inputs(paths: list[Path], recursive: bool = False) -> list[Path]:
    """Files as given; a directory stands for the supported files directly in it (by content), sorted by name, or
    with `recursive` in it and every folder below it, sorted by path."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            children = sorted(path.rglob("*")) if recursive else sorted(path.iterdir())
            files.extend(child for child in children if child.is_file() and _supported(child))
        else:
            files.append(path)
    return files


def _supported(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return sniff(handle.read(1024)) is not None
    except OSError:
        return False


def _run_pages(document: IngestedDocument, recognizer: Recognizer, layout: LayoutBackend, options: ProcessOptions,
               on_page: PageCallback | None) -> list[PageOutput]:
    pages: list[PageOutput] = []
    window: deque[_InFlight | FinishedPage] = deque()
    in_flight = max(1, options.pages_in_flight)

    def finish_oldest() -> None:
        oldest = window.popleft()
        done = _finish(oldest, document.page_count) if isinstance(oldest, _InFlight) else oldest
        pages.append(done.output)
        if on_page is not None:
            on_page(done)

    sources = (source for source in document.pages() if options.pages is None or source.index in options.pages)
    for batch in _batches(sources, min(in_flight, max(1, options.layout_batch))):
        for laid_out in lay_out_many(batch, layout, options.regions):
            window.append(_submit(laid_out, recognizer))
            while len(window) > in_flight:
                finish_oldest()
    while window:
        finish_oldest()
    return pages


def _batches(sources: Iterable[SourcePage], size: int) -> Iterator[list[SourcePage]]:
    iterator = iter(sources)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _submit(laid_out: LaidOutPage | FinishedPage, recognizer: Recognizer) -> _InFlight | FinishedPage:
    """Send a laid-out page's regions that need the model to the recognizer; a page that failed stays finished."""
    if isinstance(laid_out, FinishedPage):
        return laid_out
    page = laid_out.page
    futures = {i: recognizer.submit(RecognitionTask(crop(page, item.crop_box), item.task))
               for i, item in enumerate(laid_out.prepared) if item.needs_model}
    return _InFlight(laid_out, futures)


def lay_out(source: SourcePage, layout: LayoutBackend, options: RegionOptions) -> LaidOutPage | FinishedPage:
    """Render one page, find its regions and prepare them; a page that fails here comes back finished."""
    return lay_out_many([source], layout, options)[0]


def lay_out_many(sources: list[SourcePage], layout: LayoutBackend,
                 options: RegionOptions) -> list[LaidOutPage | FinishedPage]:
    """lay_out for several pages, their regions found in one batch; each page's layout time is its share of it."""
    rendered = [_render(source) for source in sources]
    ready = [(item[0], source) for item, source in zip(rendered, sources, strict=True) if isinstance(item, tuple)]
    started = time.perf_counter()
    found = iter(_detect_all(layout, ready))
    layout_ms = (time.perf_counter() - started) * 1000.0 / max(1, len(ready))
    laid_out: list[LaidOutPage | FinishedPage] = []
    for item, source in zip(rendered, sources, strict=True):
        if isinstance(item, FinishedPage):
            laid_out.append(item)
        else:
            page, render_ms = item
            timings = {"render": render_ms, "layout": layout_ms}
            laid_out.append(_laid_out(source, page, next(found), layout, timings, options))
    return laid_out


def _render(source: SourcePage) -> tuple[RenderedPage, float] | FinishedPage:
    """The page image and how long it took, or the page finished as failed when it cannot be rendered."""
    started = time.perf_counter()
    rendered = render_page_result(source)
    if rendered.page is None:
        error = rendered.error or DocumentError("corrupt", f"page {source.index + 1} cannot be rendered")
        output = PageOutput(source.index, "failed", error=Problem(error.code, error.message))
        return FinishedPage(output, None, source.document.page_count)
    return rendered.page, (time.perf_counter() - started) * 1000.0


def _detect_all(layout: LayoutBackend, pages: list[LaidPage]) -> list[list[DetectedRegion] | Problem]:
    """Every page's regions from one batch; when the batch raises, page by page, so only the page the backend trips
    on fails."""
    if len(pages) > 1:
        try:
            return list(detect_many(layout, pages))
        except Exception:  # told apart page by page below
            pass
    return [_detect(layout, page, source) for page, source in pages]


def _detect(layout: LayoutBackend, page: RenderedPage, source: SourcePage) -> list[DetectedRegion] | Problem:
    try:
        return layout.detect(page, source)
    except DocumentError as exc:
        return Problem(exc.code, exc.message)
    except Exception as exc:  # a layout model tripping on one odd page must not stop the document
        return Problem("layout_failed", f"{type(exc).__name__}: {exc}")


def _laid_out(source: SourcePage, page: RenderedPage, found: list[DetectedRegion] | Problem, layout: LayoutBackend,
              timings: dict[str, float], options: RegionOptions) -> LaidOutPage | FinishedPage:
    if isinstance(found, Problem):
        return _failed_page(source, page, layout.name, found, {"render": timings["render"]})
    prepared = _prepare(source, page, found, options)
    chosen = choose_layout(layout, source, page, found)
    return LaidOutPage(source.index, page, chosen.name, prepared, timings, chosen.reason)


def _prepare(source: SourcePage, page: RenderedPage, regions: list[DetectedRegion],
             options: RegionOptions) -> list[PreparedRegion]:
    """prepare_regions with the PDF text layer when asked for; a page whose text layer cannot be read goes without."""
    if options.text_layer == "off" or not source.document.is_pdf:
        return prepare_regions(page, regions, options)
    try:
        return prepare_regions(page, regions, options, source.load())
    except Exception:  # damaged content streams: the model reads the pixels instead
        return prepare_regions(page, regions, options)


def _finish(flight: _InFlight, page_count: int) -> FinishedPage:
    """Wait for a page's recognitions and build its output."""
    laid_out = flight.laid_out
    page = laid_out.page
    regions = [laid_out.region_output(i, flight.futures[i].result() if i in flight.futures else None)
               for i in range(len(laid_out.prepared))]
    error = page_problem(regions)
    output = PageOutput(laid_out.source_index, "failed" if error else "succeeded", page.width_px, page.height_px,
                        page.width_pt, page.height_pt, page.dpi, page.rotation, laid_out.layout, regions, error,
                        laid_out.timings_ms, laid_out.layout_reason)
    return FinishedPage(output, page, page_count)


def page_problem(regions: list[RegionOutput]) -> Problem | None:
    """What fails a page: every region that went to the recognizer failed (pictures, text-layer text and regions
    skipped for want of a model aside)."""
    attempted = [region for region in regions if region.status != "skipped"
                 and (region.source in ("model", "cache") or region.error is not None)]
    failures = [region.error for region in attempted if region.error is not None]
    if not attempted or len(failures) < len(attempted):
        return None
    return Problem("recognition_failed", f"no region of the page could be recognised; the first: "
                                         f"{failures[0].code}: {failures[0].message}")


def _region_output(page: RenderedPage, item: PreparedRegion, recognition: Recognition | None) -> RegionOutput:
    region = item.region
    base = RegionOutput(region.order, region.label, region.score, region.bbox, page.to_points(region.bbox),
                        item.task, "none")
    if item.task is not None and item.crop_box is None:
        return replace(base, error=Problem("empty_region", f"box {region.bbox} lies outside the page or has no area"))
    if item.text is not None:
        return replace(base, source="text-layer", content=RegionContent(item.text))
    return base if item.task is None else recognized_region(base, recognition)


def recognized_region(base: RegionOutput, recognition: Recognition | None) -> RegionOutput:
    """base (a region sent to the model, without content yet) with the recognition's content, or its error."""
    if recognition is None:
        return replace(base, source="none", error=Problem("recognition_failed", "the region was not recognised"))
    if recognition.error is not None:
        return replace(base, source="none", error=recognition.error, skipped=recognition.skipped)
    content = postprocess(base.task or "ocr", recognition.text, recognition.finish_reason)
    return replace(base, source="model", content=content, usage=recognition.usage)


def _failed_page(source: SourcePage, page: RenderedPage, layout: str, problem: Problem,
                 timings: dict[str, float]) -> FinishedPage:
    output = PageOutput(source.index, "failed", page.width_px, page.height_px, page.width_pt, page.height_pt,
                        page.dpi, page.rotation, layout, error=problem, timings_ms=timings)
    return FinishedPage(output, page, source.document.page_count)


def document_status(pages: list[PageOutput]) -> DocumentOutcome:
    """`succeeded` when every page did, `failed` when none did, else `partial`."""
    failed = sum(1 for page in pages if page.status == "failed")
    if failed == 0:
        return "succeeded"
    return "failed" if failed == len(pages) else "partial"
