"""Layout analysis: where a page's regions are, what each one is, and the order a reader takes them in.

Backends share one interface (`LayoutBackend.detect`) and one label vocabulary (PP-DocLayout's), so the
rest of the pipeline never knows which backend found a region. Boxes are pixels on the rendered page
image; `RenderedPage.to_points` maps them back to page points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pipeline.documents.ingest import SourcePage
from pipeline.documents.render import RenderedPage

BBox = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels of the rendered page image

# PP-DocLayout's classes; every backend speaks this vocabulary.
LABELS: frozenset[str] = frozenset({
    "abstract", "algorithm", "aside_text", "chart", "content", "display_formula", "doc_title", "figure_title",
    "footer", "footer_image", "footnote", "formula_number", "header", "header_image", "image", "inline_formula",
    "number", "paragraph_title", "reference", "reference_content", "seal", "table", "text", "vertical_text",
    "vision_footnote",
})


@dataclass(frozen=True)
class Region:
    """One detected region of a page."""

    bbox: BBox
    label: str
    score: float
    order: int  # reading-order index on its page, 0-based, contiguous


class LayoutBackend(Protocol):
    name: str

    def detect(self, page: RenderedPage, source: SourcePage) -> list[Region]:
        """Regions of one rendered page, sorted by `order`; `source` gives backends the PDF page itself."""
        ...


class PageLayout:
    """The whole page as one `text` region: plain letters, and the fallback when nothing else fits."""

    name = "page"

    def detect(self, page: RenderedPage, source: SourcePage) -> list[Region]:
        return [Region((0.0, 0.0, float(page.width_px), float(page.height_px)), "text", 1.0, 0)]
