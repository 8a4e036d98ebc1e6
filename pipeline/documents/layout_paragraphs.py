"""Paragraphs from PyMuPDF's text blocks, where its grouping of lines and a reader's part ways.

MuPDF groups lines into a block by their spacing and their left edges, which goes wrong two ways. A heading set
close above a short line or two (a title over its author and date) lands in one block with them, and the whole
block would be labelled a heading. And a paragraph whose first line is outdented (a hanging indent: reference
lists, glossaries) starts a block of its own at that line, which would cut the paragraph mid-sentence. So blocks
are cut where the type size steps from one row to the next, and an outdented line is joined to the indented rows
it opens.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import pairwise

from pipeline.documents.layout_contract import BBox
from pipeline.documents.layout_geometry import middle_y, union
from pipeline.documents.layout_text import Line
from pipeline.documents.render import RenderedPage

_SIZE_STEP = 1.15  # rows whose type sizes differ by this factor are not one paragraph (LaTeX: 12 pt over 10 pt)
_HANG_EM = (0.5, 6.0)  # how far right of a hanging first line the rest of its paragraph starts
_ALIGN_EM = 0.5  # the rest's rows start this close to one another
_FULL_EM = 3.0  # a hanging first line runs this close to the rest's right edge: it was wrapped, not ended
_LEADING_EM = (-0.3, 0.8)  # the space between the first line and the rest, as between a paragraph's rows
_SENTENCE_END = (".", "!", "?", ":")


def paragraphs(runs: list[list[Line]], page: RenderedPage) -> list[list[Line]]:
    """The runs of text lines cut where the type size steps and with each hanging first line joined to its rest."""
    cut = [[line for row in part for line in row] for run in runs for part in _size_parts(_rows(run))]
    return _join_hanging(cut, page)


def _rows(lines: list[Line]) -> list[list[Line]]:
    """Lines that share a row (a sub- or superscript is a line of its own in PyMuPDF), in the block's order."""
    rows: list[list[Line]] = []
    for line in lines:
        if rows and _on_row(line, rows[-1]):
            rows[-1].append(line)
        else:
            rows.append([line])
    return rows


def _on_row(line: Line, row: list[Line]) -> bool:
    box = union(other.bbox for other in row)
    return box[1] <= middle_y(line.bbox) <= box[3] or line.bbox[1] <= middle_y(box) <= line.bbox[3]


def _size_parts(rows: list[list[Line]]) -> list[list[list[Line]]]:
    """Consecutive rows of about one type size, together."""
    parts = [[rows[0]]]
    for before, row in pairwise(rows):
        big, small = max(_size(before), _size(row)), min(_size(before), _size(row))
        if big >= _SIZE_STEP * small:
            parts.append([row])
        else:
            parts[-1].append(row)
    return parts


def _size(lines: list[Line]) -> float:
    return max(line.size for line in lines)


def _join_hanging(runs: list[list[Line]], page: RenderedPage) -> list[list[Line]]:
    """Each hanging first line joined to the run it opens; only runs starting right below a line are tried, so a
    page of many short blocks (an index) costs no more than a page of paragraphs."""
    boxes = [union(line.bbox for line in run) for run in runs]
    by_top = sorted(range(len(runs)), key=lambda index: boxes[index][1])
    tops = [boxes[index][1] for index in by_top]
    rests: dict[int, int] = {}  # a first line's run → the run it opens
    for index, run in enumerate(runs):
        if index in rests.values() or not _unfinished_row(run):
            continue
        em, bottom = _size(run) * page.scale, boxes[index][3]
        near = by_top[bisect_left(tops, bottom + _LEADING_EM[0] * em):bisect_right(tops, bottom + _LEADING_EM[1] * em)]
        rest = next((other for other in near if other != index and other not in rests and other not in rests.values()
                     and _hangs(run, boxes[index], runs[other], boxes[other], page)), None)
        if rest is not None:
            rests[index] = rest
    taken = set(rests.values())
    return [run + runs[rests[index]] if index in rests else run
            for index, run in enumerate(runs) if index not in taken]


def _unfinished_row(run: list[Line]) -> bool:
    """One row that ends mid-sentence: what a hanging first line looks like on its own."""
    return len(_rows(run)) == 1 and not run[-1].text.rstrip().endswith(_SENTENCE_END)


def _hangs(first: list[Line], head: BBox, rest: list[Line], body: BBox, page: RenderedPage) -> bool:
    """Whether `first`, the one row boxed by `head` right above `rest`, is the outdented first line of its rows:
    reaching their right edge (wrapped, not ended), left of their common start, in their type size."""
    em = _size(first) * page.scale
    if head[2] < body[2] - _FULL_EM * em:
        return False
    starts = [min(line.bbox[0] for line in row) for row in _rows(rest)]
    return (_HANG_EM[0] * em <= starts[0] - head[0] <= _HANG_EM[1] * em
            and max(starts) - min(starts) <= _ALIGN_EM * em
            and max(_size(first), _size(rest)) < _SIZE_STEP * min(_size(first), _size(rest)))
