"""Which layout actually laid a page out, and why, when it is not the one asked for.

`auto` picks per page and the `pdf` backend falls back to the whole page where a page has no text layer, so the
name asked for says little about a given page: a scan under `auto` without layout weights is one whole-page
region, and its result should say so ("page", "no layout weights, no text layer") rather than "pdf".
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.documents.layout import AutoLayout, LayoutBackend
from pipeline.documents.layout_contract import DetectedRegion
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage

NO_WEIGHTS = "no layout weights"


@dataclass(frozen=True)
class LayoutChoice:
    name: str  # the backend whose regions the page has: pp-doclayout, pdf, page, or a custom backend's name
    reason: str | None = None  # why, when that is not simply what was asked for


def choose_layout(layout: LayoutBackend, source: SourcePage, page: RenderedPage,
                  regions: list[DetectedRegion]) -> LayoutChoice:
    """The layout `regions` (what `layout` found on the page) came from, with the reason for any fallback."""
    pick = getattr(layout, "backend_for", None)
    backend = pick(source) if pick is not None else layout
    reasons = [NO_WEIGHTS] if isinstance(layout, AutoLayout) and layout.model is None else []
    if backend.name == "pdf" and regions == PageLayout().detect(page, source):
        reasons.append("no text layer" if source.document.is_pdf else "not a PDF")
        return LayoutChoice("page", ", ".join(reasons))
    if backend.name == "page" and reasons:
        reasons.append("not a PDF")
    return LayoutChoice(backend.name, ", ".join(reasons) or None)
