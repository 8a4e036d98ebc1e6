"""Box arithmetic shared by the pdf backend's modules: boxes are (x0, y0, x1, y1) pixels, y pointing down."""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.documents.layout_contract import BBox


def union(boxes: Iterable[BBox]) -> BBox:
    boxes = list(boxes)
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def area(box: BBox) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def intersection(a: BBox, b: BBox) -> float:
    return area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def middle_y(box: BBox) -> float:
    return (box[1] + box[3]) / 2


def center_inside(box: BBox, containers: Iterable[BBox]) -> bool:
    """Whether the centre of `box` lies in a container at least as large as it."""
    cx, cy = (box[0] + box[2]) / 2, middle_y(box)
    return any(c[0] <= cx <= c[2] and c[1] <= cy <= c[3] and area(c) >= area(box) for c in containers)


def mostly_inside(box: BBox, containers: Iterable[BBox]) -> bool:
    return any(intersection(box, c) >= 0.5 * area(box) for c in containers)


def distance(a: BBox, b: BBox) -> tuple[float, float]:
    """The horizontal and vertical gaps between two boxes (0 along an axis where they overlap)."""
    return max(0.0, b[0] - a[2], a[0] - b[2]), max(0.0, b[1] - a[3], a[1] - b[3])


def next_to(box: BBox, other: BBox, reach: float) -> bool:
    """Whether `other` lies just above or below `box` (within `reach`), overlapping it horizontally."""
    return box[0] < other[2] and other[0] < box[2] and distance(box, other)[1] <= reach
