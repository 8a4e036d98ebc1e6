"""Layout analysis: where a page's regions are, what each one is, and the order a reader takes them in.

Backends share one interface (`LayoutBackend.detect`) and the contract of layout_contract.py (its box format and
PP-DocLayout's label vocabulary), so the rest of the pipeline never knows which backend found a region.
`detect_many` lays several pages out at once, in one forward pass of a backend that batches (the model), page by
page otherwise. `layout_backend(name)` builds one:

- `pp-doclayout`: PP-DocLayoutV2/V3 through transformers (layout_model.py), boxes and the model's reading order;
- `pdf`: a born-digital page's own structure read with PyMuPDF, no model (layout_pdf.py);
- `page`: the whole page as one `text` region (layout_page.py);
- `auto`: pp-doclayout when its weights are on this machine, else pdf for PDF pages (which itself falls back to
  the whole page when a page has no text layer), else page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pipeline.config import get_settings
from pipeline.documents.layout_contract import DetectedRegion, LaidPage
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.layout_weights import local_layout_weights
from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage

__all__ = ["LAYOUT_BACKENDS", "AutoLayout", "LayoutBackend", "NamedLayout", "batches", "detect_many", "layout_backend",
           "reads_pdf"]

LAYOUT_BACKENDS = ("auto", "pp-doclayout", "pdf", "page")


class LayoutBackend(Protocol):
    name: str

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        """Regions of one rendered page, sorted by `order`; `source` gives backends the PDF page itself."""
        ...


class AutoLayout:
    """The best backend this machine can run, per page: the model if its weights are here, else the PDF itself.

    Never downloads: a missing model silently means the model-free backends, unlike asking for `pp-doclayout`.
    """

    name = "auto"

    def __init__(self, model: str | None, device: str = "cpu") -> None:
        """`model`: the layout weights to look for on this machine; None: the model-free backends alone."""
        weights = local_layout_weights(model) if model is not None else None
        self.model: LayoutBackend | None = None
        if weights is not None:
            from pipeline.documents.layout_model import PPDocLayout

            self.model = PPDocLayout(weights, device)
        self._pdf: LayoutBackend = PdfLayout()
        self._page: LayoutBackend = PageLayout()

    def backend_for(self, source: SourcePage) -> LayoutBackend:
        """The backend that lays out `source`."""
        if self.model is not None:
            return self.model
        return self._pdf if source.document.is_pdf else self._page

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        return self.backend_for(source).detect(page, source)

    def detect_many(self, pages: Sequence[LaidPage]) -> list[list[DetectedRegion]]:
        if self.model is not None:
            return detect_many(self.model, pages)
        return [self.detect(page, source) for page, source in pages]


class NamedLayout:
    """Stands for a layout that runs elsewhere (a model beside the engine) where only its name is needed: a page
    worker finishing a page with the regions that layout found names the page after it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        raise RuntimeError(f"the {self.name} layout runs in the engine's process, not here")


def batches(layout: LayoutBackend) -> bool:
    """Whether `layout` lays pages out in batches (a model: one forward pass for many pages), so pages are rendered
    first and laid out together; a model-free backend reads each page where it is rendered."""
    if isinstance(layout, AutoLayout):
        return layout.model is not None
    return hasattr(layout, "detect_many")


def reads_pdf(layout: LayoutBackend) -> bool:
    """Whether `layout` reads a PDF's own structure, running headers and footers included (layout_furniture.py)."""
    return isinstance(layout, PdfLayout) or isinstance(layout, AutoLayout) and layout.model is None


def detect_many(layout: LayoutBackend, pages: Sequence[LaidPage]) -> list[list[DetectedRegion]]:
    """Each page's regions, as `layout.detect` finds them one page at a time: in one forward pass when the backend
    batches (`detect_many`; a GPU lays out a batch of pages in little more time than one), else page by page."""
    batched = getattr(layout, "detect_many", None)
    if batched is not None:
        return batched(pages)
    return [layout.detect(page, source) for page, source in pages]


def layout_backend(name: str, model: str | None = None, device: str = "cpu") -> LayoutBackend:
    """The layout backend called `name` (one of LAYOUT_BACKENDS); `model` is the PP-DocLayout directory or hub id.

    `pp-doclayout` without its weights raises LayoutModelUnavailable with how to get them; an unknown name
    raises ValueError. The model backend is imported only when asked for: it alone pulls in torch.
    """
    if name not in LAYOUT_BACKENDS:
        raise ValueError(f"unknown layout backend {name!r}: choose one of {', '.join(LAYOUT_BACKENDS)}")
    if name == "page":
        return PageLayout()
    if name == "pdf":
        return PdfLayout()
    if model is None:
        model = get_settings().layout_model
    if name == "auto":
        return AutoLayout(model, device)
    from pipeline.documents.layout_model import PPDocLayout

    return PPDocLayout.load(model, device)
