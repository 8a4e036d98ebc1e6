"""Convert the recognizer's OTSL table output to an HTML <table> with rowspan/colspan.

OTSL lays a table out as a grid of slot tags, row by row: `<fcel>` starts a cell whose text follows, `<ecel>` an
empty cell, `<lcel>` continues the cell to its left (colspan), `<ucel>` the cell above (rowspan), `<xcel>` both
(the inside of a block span), and `<nl>` ends a row. A model's output is not always well formed (ragged rows,
orphan merge tags, stray or unknown tags, text with no tag), so the converter repairs rather than rejects:
rows are padded to a rectangle, an orphan merge slot becomes an empty cell, unknown tags are dropped, text is
never lost (text in a merged slot joins its cell), and otsl_to_html never raises. Docling's header/section tags
(`<ched>`, `<rhed>`, `<srow>`) are read as text cells, `<ched>` as a `<th>`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_TAG = re.compile(r"<\s*(/?)\s*([A-Za-z]+)\s*/?\s*>")
_OTSL_TAG = re.compile(r"<\s*/?\s*(?:fcel|ecel|lcel|ucel|xcel|nl|ched|rhed|srow)\s*/?\s*>", re.IGNORECASE)
_CELL_TAGS = {"fcel", "ecel", "ched", "rhed", "srow"}
_MERGE_TAGS = {"lcel", "ucel", "xcel"}
_LEFT = {"lcel", "xcel"}  # slot continues the cell to its left
_UP = {"ucel", "xcel"}  # slot continues the cell above


@dataclass
class _Slot:
    tag: str
    texts: list[str] = field(default_factory=list)


@dataclass
class _Cell:
    text: str
    header: bool
    rowspan: int
    colspan: int


def otsl_to_html(otsl: str) -> str:
    """OTSL → `<table>…</table>`; input with no OTSL cell tags at all comes back as escaped plain text."""
    try:
        rows = _parse(otsl)
        if not rows:
            return html.escape(" ".join(_OTSL_TAG.sub(" ", otsl).split()))
        return _emit(_resolve(rows))
    except Exception:  # a last resort: the converter must never fail a page
        return html.escape(str(otsl))


def _parse(otsl: str) -> list[list[_Slot]]:
    """Split into rows of slots; text after a tag belongs to that slot. Empty rows are dropped, ragged kept."""
    rows: list[list[_Slot]] = []
    row: list[_Slot] = []
    seen_cell_tag = False
    position = 0
    for match in _TAG.finditer(otsl):
        _add_text(row, otsl[position : match.start()])
        position = match.end()
        closing, name = match.group(1), match.group(2).lower()
        if closing:
            continue  # `</fcel>` and the like: nothing to do
        if name == "nl":
            if row:
                rows.append(row)
            row = []
        elif name in _CELL_TAGS or name in _MERGE_TAGS:
            seen_cell_tag = True
            row.append(_Slot(name))
        # any other tag (<td>, <br>, <foo>) is dropped; its surrounding text stays with the current slot
    _add_text(row, otsl[position:])
    if row:
        rows.append(row)
    return rows if seen_cell_tag else []


def _add_text(row: list[_Slot], text: str) -> None:
    text = " ".join(text.split())
    if not text:
        return
    if not row:  # text before any tag in this row: it is a cell of its own
        row.append(_Slot("fcel"))
    row[-1].texts.append(text)


def _resolve(rows: list[list[_Slot]]) -> list[list[_Cell | None]]:
    """Pad to a rectangle and turn slots into cells with spans; None marks a grid slot covered by a span."""
    width = max(len(row) for row in rows)
    grid = [row + [_Slot("ecel") for _ in range(width - len(row))] for row in rows]
    height = len(grid)
    covered = [[False] * width for _ in range(height)]
    out: list[list[_Cell | None]] = [[None] * width for _ in range(height)]
    for r in range(height):
        for c in range(width):
            if covered[r][c]:
                continue
            # An origin: a cell tag, or an orphan merge slot (nothing to merge into), read as an empty cell.
            colspan = 1
            while c + colspan < width and not covered[r][c + colspan] and grid[r][c + colspan].tag in _LEFT:
                colspan += 1
            rowspan = 1
            while r + rowspan < height and _continues_up(grid, covered, r + rowspan, c, colspan):
                rowspan += 1
            texts: list[str] = []
            for rr in range(r, r + rowspan):
                for cc in range(c, c + colspan):
                    covered[rr][cc] = True
                    texts.extend(grid[rr][cc].texts)
            out[r][c] = _Cell(" ".join(texts), grid[r][c].tag == "ched", rowspan, colspan)
    return out


def _continues_up(grid: list[list[_Slot]], covered: list[list[bool]], r: int, c: int, colspan: int) -> bool:
    """Row r extends the span above it over columns c..c+colspan-1: `ucel` first, then `xcel`/merge slots."""
    if grid[r][c].tag not in _UP:
        return False
    return all(not covered[r][cc] and grid[r][cc].tag in _MERGE_TAGS for cc in range(c, c + colspan))


def _emit(cells: list[list[_Cell | None]]) -> str:
    parts = ["<table>"]
    for row in cells:
        parts.append("<tr>")
        for cell in row:
            if cell is None:
                continue
            tag = "th" if cell.header else "td"
            spans = ""
            if cell.rowspan > 1:
                spans += f' rowspan="{cell.rowspan}"'
            if cell.colspan > 1:
                spans += f' colspan="{cell.colspan}"'
            parts.append(f"<{tag}{spans}>{html.escape(cell.text)}</{tag}>")
        parts.append("</tr>")
    parts.append("</table>")
    return "".join(parts)
