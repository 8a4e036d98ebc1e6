"""The `page` layout backend: the whole page as one `text` region, for plain letters and as every fallback."""

from __future__ import annotations

from pipeline.documents.layout_contract import DetectedRegion
from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage


class PageLayout:
    """The region a page gets when nothing finer fits: the `pdf` backend's answer for a page without a text layer."""

    name = "page"

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        return [DetectedRegion((0.0, 0.0, float(page.width_px), float(page.height_px)), "text", 1.0, 0)]
