"""Reading order for boxes found without a model: recursive XY-cut that looks for columns first.

A page is split at a vertical gap no box crosses (a column gutter) before it is split at a horizontal one,
because in a two-column body the paragraph gaps of both columns often line up: cutting those first would
interleave the columns. Full-width elements (a title, a wide figure) cross every gutter, so they end up cut
off horizontally and read in place, and each column between them is read top to bottom.
"""

from __future__ import annotations

from collections.abc import Sequence

Box = tuple[float, float, float, float]  # x0, y0, x1, y1, y pointing down


def xy_cut_order(boxes: Sequence[Box], min_column_gap: float = 0.0) -> list[int]:
    """Indices of `boxes` in reading order: columns left to right, each top to bottom.

    `min_column_gap` is how wide an empty vertical strip must be to count as a gutter between columns.
    """
    return _order(list(range(len(boxes))), boxes, min_column_gap)


def _order(indices: list[int], boxes: Sequence[Box], min_column_gap: float) -> list[int]:
    if len(indices) <= 1:
        return indices
    for axis, gap in ((0, min_column_gap), (1, 0.0)):
        groups = _split(indices, boxes, axis, gap)
        if len(groups) > 1:
            return [index for group in groups for index in _order(group, boxes, min_column_gap)]
    # Boxes that overlap both ways (a caption printed on a figure, say): top to bottom, then left to right.
    return sorted(indices, key=lambda i: (boxes[i][1], boxes[i][0]))


def _split(indices: list[int], boxes: Sequence[Box], axis: int, min_gap: float) -> list[list[int]]:
    """Groups of boxes separated along `axis` (0: x, 1: y) by empty strips wider than `min_gap`."""
    ordered = sorted(indices, key=lambda i: (boxes[i][axis], boxes[i][axis + 2]))
    groups: list[list[int]] = [[ordered[0]]]
    reach = boxes[ordered[0]][axis + 2]
    for index in ordered[1:]:
        start, end = boxes[index][axis], boxes[index][axis + 2]
        if start >= reach + min_gap:
            groups.append([index])
        else:
            groups[-1].append(index)
        reach = max(reach, end)
    return groups
