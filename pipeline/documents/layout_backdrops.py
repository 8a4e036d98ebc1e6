"""Drawn panels behind text: the shapes that prose or headings sit on, which no figure is made of.

Slides, posters and reports set text on a tinted panel or inside a framed box. PyMuPDF clusters such a shape with
every drawing on it, so the panel would become one picture and the page's text its labels, read only as alt text.
A filled shape (square-cornered or rounded) or a rectangular frame with a line on it that no picture prints as a
label (prose, a heading, a caption) is a backdrop: it leaves the drawings before figures are clustered, so its text
stays text and a chart drawn on it is still found on its own.
"""

from __future__ import annotations

from pipeline.documents.layout_contract import BBox
from pipeline.documents.layout_geometry import area, center_inside
from pipeline.documents.layout_text import on_image
from pipeline.documents.render import RenderedPage


def without_backdrops(drawings: list[dict], prose: list[BBox], page: RenderedPage) -> list[dict]:
    """The drawings less the panels (filled shapes, rounded or not) and frames (rectangles) under any of the
    `prose` line boxes (pixels)."""
    if not prose:
        return drawings
    smallest = min(area(line) for line in prose)  # a shape smaller than any prose line holds none (a map's many)
    return [path for path in drawings if not _is_backdrop(path, prose, smallest, page)]


def _is_backdrop(path: dict, prose: list[BBox], smallest: float, page: RenderedPage) -> bool:
    framed = bool(path["items"]) and all(item[0] in ("re", "qu") for item in path["items"])
    if not framed and path.get("fill") is None:
        return False
    box = on_image(page, tuple(path["rect"]))
    return box is not None and area(box) >= smallest and any(center_inside(line, [box]) for line in prose)
