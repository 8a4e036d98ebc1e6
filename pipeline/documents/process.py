"""What both halves of processing a page share: the options, a laid-out page and its draft, a page as it leaves the
pipeline, and how a page's and a document's outcome follow from their regions.

The work of a page splits in two. Its CPU half (render, layout, regions, crops, the page's PNGs) is a task of
page_work.py, run in a page worker process or in the calling thread (page_pool.py); its model half is the
recognizer's. stream.py runs documents through both: many at once (`process_stream`), or one in the calling thread
(`process_document`, `process_file`).

Bad input never raises: an unreadable or refused document comes back `failed` with its error code, a page that
cannot be rendered, laid out or recognised comes back `failed` with its code and its document `partial`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline.documents.errors import DocumentError
from pipeline.documents.layout import LayoutBackend, detect_many
from pipeline.documents.layout_choice import choose_layout
from pipeline.documents.layout_contract import DetectedRegion, LaidPage
from pipeline.documents.page_images import PageImages
from pipeline.documents.page_ranges import PageRanges
from pipeline.documents.postprocess import postprocess
from pipeline.documents.recognizer import Recognition
from pipeline.documents.regions import PreparedRegion, RegionOptions, prepare_regions
from pipeline.documents.render import RenderedPage, render_page_result
from pipeline.documents.results import (
    DocumentOutcome,
    PageOutput,
    Problem,
    RegionContent,
    RegionOutput,
)
from pipeline.documents.source import Limits, SourcePage, sniff


@dataclass(frozen=True)
class ProcessOptions:
    limits: Limits = field(default_factory=Limits)
    regions: RegionOptions = field(default_factory=RegionOptions)
    password: str | None = None
    pages_in_flight: int = 16  # pages rendered and submitted ahead of the oldest unfinished one, over all documents
    layout_batch: int = 8  # pages laid out together (at most pages_in_flight): one forward pass of a layout model
    pages: PageRanges | None = None  # only these pages (None: all); pages past the end are not there to take
    page_images: bool = False  # PNGs of each page, its overlay and its pictures, for a writer (FinishedPage.images)


@dataclass(frozen=True)
class FinishedPage:
    """A page as it leaves the pipeline, with its PNGs when they were asked for (None: not asked for, or the page
    did not render)."""

    output: PageOutput
    images: PageImages | None
    page_count: int


PageCallback = Callable[[FinishedPage], None]


@dataclass(frozen=True)
class FailedPage:
    """A page that failed before recognition (it did not render, or its layout failed): its output, and its image
    when it rendered, so a writer still shows the page."""

    output: PageOutput
    page: RenderedPage | None = None


@dataclass(frozen=True)
class PageDraft:
    """A laid-out page as plain data: its output with every region final but those in `pending`, which wait for the
    recognizer. What crosses from a page worker to the process that holds the recognizer."""

    output: PageOutput
    pending: tuple[int, ...] = ()  # positions in output.regions of the regions sent to the model

    def finished(self, recognitions: Mapping[int, Recognition]) -> PageOutput:
        """The page's output once the pending regions' recognitions are in (a missing one failed)."""
        if not self.pending:
            return self.output
        regions = list(self.output.regions)
        for position in self.pending:
            regions[position] = recognized_region(regions[position], recognitions.get(position))
        error = page_problem(regions)
        return replace(self.output, status="failed" if error else "succeeded", regions=regions, error=error)


@dataclass
class LaidOutPage:
    """A rendered page with its regions prepared: the work between layout and recognition."""

    source_index: int
    page: RenderedPage
    layout: str
    prepared: list[PreparedRegion]
    timings_ms: dict[str, float]
    layout_reason: str | None = None

    def draft(self) -> PageDraft:
        """The page's output, its regions for the model pending."""
        page = self.page
        regions = [_base_output(page, item) for item in self.prepared]
        output = PageOutput(self.source_index, "succeeded", page.width_px, page.height_px, page.width_pt,
                            page.height_pt, page.dpi, page.rotation, self.layout, regions, None, self.timings_ms,
                            self.layout_reason)
        return PageDraft(output, tuple(i for i, item in enumerate(self.prepared) if item.needs_model))


def out_of_range(pages: PageRanges, page_count: int) -> Problem:
    return Problem("pages_out_of_range", f"pages {pages.text} asked for; the document has {page_count}")


def scan_directory(directory: Path, recursive: bool = False) -> tuple[list[Path], list[Path]]:
    """(the supported files directly in it, by content, sorted by name, or with `recursive` in it and every folder
    below it, sorted by path; the other files, left alone), so a caller can say what it did not take."""
    children = sorted(directory.rglob("*")) if recursive else sorted(directory.iterdir())
    supported: list[Path] = []
    others: list[Path] = []
    for child in (child for child in children if child.is_file()):
        (supported if _supported(child) else others).append(child)
    return supported, others


def _supported(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return sniff(handle.read(1024)) is not None
    except OSError:
        return False


def lay_out(source: SourcePage, layout: LayoutBackend, options: RegionOptions) -> LaidOutPage | FailedPage:
    """Render one page, find its regions and prepare them; a page that fails here comes back failed."""
    return lay_out_many([source], layout, options)[0]


def lay_out_many(sources: list[SourcePage], layout: LayoutBackend,
                 options: RegionOptions) -> list[LaidOutPage | FailedPage]:
    """lay_out for several pages, their regions found in one batch; each page's layout time is its share of it."""
    rendered = [render_timed(source) for source in sources]
    ready = [(item[0], source) for item, source in zip(rendered, sources, strict=True) if isinstance(item, tuple)]
    started = time.perf_counter()
    found = iter(detect_all(layout, ready))
    layout_ms = (time.perf_counter() - started) * 1000.0 / max(1, len(ready))
    laid_out: list[LaidOutPage | FailedPage] = []
    for item, source in zip(rendered, sources, strict=True):
        if isinstance(item, FailedPage):
            laid_out.append(item)
        else:
            page, render_ms = item
            timings = {"render": render_ms, "layout": layout_ms}
            laid_out.append(finish_layout(source, page, next(found), layout, timings, options))
    return laid_out


def render_timed(source: SourcePage) -> tuple[RenderedPage, float] | FailedPage:
    """The page image and how long it took (ms), or the page failed when it cannot be rendered."""
    started = time.perf_counter()
    rendered = render_page_result(source)
    if rendered.page is None:
        error = rendered.error or DocumentError("corrupt", f"page {source.index + 1} cannot be rendered")
        return FailedPage(PageOutput(source.index, "failed", error=Problem(error.code, error.message)))
    return rendered.page, (time.perf_counter() - started) * 1000.0


def detect_all(layout: LayoutBackend, pages: list[LaidPage]) -> list[list[DetectedRegion] | Problem]:
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


def finish_layout(source: SourcePage, page: RenderedPage, found: list[DetectedRegion] | Problem,
                  layout: LayoutBackend, timings: dict[str, float], options: RegionOptions) -> LaidOutPage | FailedPage:
    """The page with the regions `layout` found on it prepared (tasks, crops, text layer), or failed with the
    problem the layout met."""
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


def _base_output(page: RenderedPage, item: PreparedRegion) -> RegionOutput:
    """The region's output without the model's part: final for a picture, text-layer text or an empty box."""
    region = item.region
    base = RegionOutput(region.order, region.label, region.score, region.bbox, page.to_points(region.bbox),
                        item.task, "none")
    if item.task is not None and item.crop_box is None:
        return replace(base, error=Problem("empty_region", f"box {region.bbox} lies outside the page or has no area"))
    if item.text is not None:
        return replace(base, source="text-layer", content=RegionContent(item.text))
    return base


def recognized_region(base: RegionOutput, recognition: Recognition | None) -> RegionOutput:
    """base (a region sent to the model, without content yet) with the recognition's content, or its error."""
    if recognition is None:
        return replace(base, source="none", error=Problem("recognition_failed", "the region was not recognised"))
    if recognition.error is not None:
        return replace(base, source="none", error=recognition.error, skipped=recognition.skipped)
    content = postprocess(base.task or "ocr", recognition.text, recognition.finish_reason)
    return replace(base, source="model", content=content, usage=recognition.usage)


def _failed_page(source: SourcePage, page: RenderedPage, layout: str, problem: Problem,
                 timings: dict[str, float]) -> FailedPage:
    output = PageOutput(source.index, "failed", page.width_px, page.height_px, page.width_pt, page.height_pt,
                        page.dpi, page.rotation, layout, error=problem, timings_ms=timings)
    return FailedPage(output, page)


def document_status(pages: list[PageOutput]) -> DocumentOutcome:
    """`succeeded` when every page did and no region was skipped for want of a model, `failed` when no page did,
    else `partial`: a scan read without a model succeeds page by page but holds none of its text."""
    failed = sum(1 for page in pages if page.status == "failed")
    if failed == 0 and not any(region.skipped for page in pages for region in page.regions):
        return "succeeded"
    return "failed" if failed == len(pages) else "partial"
