"""Drawn data: the curves and slanted strokes of a plot, which a table's ruled area never holds.

A plot drawn on a ruled grid looks like a table to the line-based finders: its grid lines are rules, and a legend,
point labels or annotations put words into its cells. What a table never has is data drawn across it: a curve or
a polyline running over much of its width. A ruled area whose curves and slanted strokes together span at least
half its width is a plot; a diagonal in a table's corner cell or its rounded corners span far less.
"""

from __future__ import annotations

from pipeline.documents.layout_contract import BBox
from pipeline.documents.layout_geometry import center_inside
from pipeline.documents.layout_text import on_image
from pipeline.documents.render import RenderedPage

_PLOTTED_SHARE = 0.5  # of the area's width that curves and slanted strokes span together in a plot


def holds_plot(box: BBox, drawings: list[dict], page: RenderedPage) -> bool:
    """Whether curves and slanted strokes inside `box` (pixels) together span half its width or more."""
    span = sum(stroke[2] - stroke[0] for path in drawings for item in path["items"]
               if (stroke := _plotted(item, page)) is not None and center_inside(stroke, [box]))
    return span >= _PLOTTED_SHARE * (box[2] - box[0])


def _plotted(item: tuple, page: RenderedPage) -> BBox | None:
    """A drawing item's pixel box when it is a curve or a line neither horizontal nor vertical; else None."""
    points = item[1:5] if item[0] == "c" else item[1:3] if item[0] == "l" else ()
    if not points:
        return None
    xs, ys = [point.x for point in points], [point.y for point in points]
    if item[0] == "l" and (max(xs) - min(xs) < 1 or max(ys) - min(ys) < 1):
        return None
    return on_image(page, (min(xs), min(ys), max(xs), max(ys)), min_side=0.0)
