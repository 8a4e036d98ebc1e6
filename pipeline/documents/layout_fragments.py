"""Text blocks inside another: the sub- and superscripts PyMuPDF splits off from the lines they belong to.

A producer may write a line's small glyphs (an index, an exponent) after the rest of the line or paragraph, and
PyMuPDF then makes them a block of their own that lies within the paragraph's box. Left alone, that block is a
region of its own, and the text layer reads its words twice: in it and in the paragraph around it, whose box holds
them too. A block that lies mostly inside a larger one joins it, so the paragraph is one region read once.
"""

from __future__ import annotations

from pipeline.documents.layout_geometry import area, mostly_inside, union
from pipeline.documents.layout_text import Line


def join_inset_blocks(blocks: list[list[Line]]) -> list[list[Line]]:
    """The blocks, each one that lies mostly inside a block at least as large moved into the largest such block."""
    boxes = [union(line.bbox for line in block) for block in blocks]
    by_size = sorted(range(len(blocks)), key=lambda index: area(boxes[index]), reverse=True)
    joined: dict[int, list[Line]] = {}
    for index in by_size:
        host = next((other for other in joined if mostly_inside(boxes[index], [boxes[other]])), None)
        if host is None:
            joined[index] = list(blocks[index])
        else:
            joined[host].extend(blocks[index])
    return [joined[index] for index in range(len(blocks)) if index in joined]
