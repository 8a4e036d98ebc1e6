"""What every layout backend hands the rest of the pipeline: regions in one box format and one label vocabulary.

A module of its own so the backends (layout_page.py, layout_pdf.py, layout_model.py) depend on the contract, not on
the factory in layout.py that imports them. Boxes are pixels on the rendered page image; `RenderedPage.to_points`
maps them back to page points.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage

BBox = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels of the rendered page image
LaidPage = tuple[RenderedPage, SourcePage]  # what a backend lays out: the page image and the page it was rendered from

# PP-DocLayout's classes; every backend speaks this vocabulary.
LABELS: frozenset[str] = frozenset({
    "abstract", "algorithm", "aside_text", "chart", "content", "display_formula", "doc_title", "figure_title",
    "footer", "footer_image", "footnote", "formula_number", "header", "header_image", "image", "inline_formula",
    "number", "paragraph_title", "reference", "reference_content", "seal", "table", "text", "vertical_text",
    "vision_footnote",
})


@dataclass(frozen=True)
class DetectedRegion:
    """One region a backend found on a page (a `Region` row in the database once stored)."""

    bbox: BBox
    label: str
    score: float
    order: int  # reading-order index on its page, 0-based, contiguous
