"""Display formulas on a born-digital page: math lines set apart from the text, with their equation numbers.

A display formula is a row (the lines of a block that share a height: a formula's sub- and superscripts are lines of
their own in PyMuPDF) that is mostly math, in math fonts or math symbols, and set apart from the text around it:
indented or centred in its column, or with more space above and below than between the lines of a paragraph.
Consecutive such rows (a fraction's numerator and denominator, an aligned system) are one formula, and so are the
short pieces without prose right above or below it (a limit, a lone denominator) however PyMuPDF split them off into
blocks of their own: nothing of a formula is left behind as text. Math inside a line of prose is neither: the line
starts at the column's edge with normal spacing and stays text, so the text layer keeps serving it. An equation
number — "(3)", "(2.1a)" — an em or more away at either end of a formula's row is cut off as the formula's
`formula_number`, so the formula goes to the model without it and Markdown tags it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from pipeline.documents.layout_contract import BBox
from pipeline.documents.layout_geometry import middle_y, union
from pipeline.documents.layout_text import Line, Span, math_weight, span_box
from pipeline.documents.render import RenderedPage

_EQUATION_NUMBER = re.compile(r"^\(\s*[\w.,:'′*†‡–-]{1,10}\s*\)$")
_MIN_MATH = 2  # characters of math a formula row holds at least
_MIN_MATH_SHARE = 0.4  # of its math and prose characters ("x ∈ A für alle x ∈ X" is a formula, at 0.46)
_INDENT_EM = 1.5  # a set-apart row keeps this far from both edges of its column (a paragraph indent is ~1 em)
_SPACE_EM = 0.6  # or has this much space above and below it (paragraph lines touch, or nearly)
_PIECE_CHARS = 12  # a formula's piece in a block of its own (a limit, an index, a denominator) is this short
_PIECE_REACH_EM = 1.0  # ... and this close above or below the formula, in ems of its own size
_WINDOW_SHARE = 0.25  # the column around a row: lines overlapping it horizontally within this share of the page


_Boxed = tuple[BBox, Span]  # a span with its box in pixels


@dataclass(frozen=True)
class Formula:
    """A display formula's box and, when it has one, its equation number's box (pixels)."""

    bbox: BBox
    number: BBox | None = None


@dataclass(frozen=True)
class _Row:
    lines: tuple[Line, ...]

    @property
    def em(self) -> float:
        """The font size in points (the caller scales it to pixels)."""
        return max(line.size for line in self.lines)


def split_formulas(blocks: list[list[Line]], page: RenderedPage) -> tuple[list[Formula], list[list[Line]]]:
    """The page's display formulas, and the text blocks left around them (a block cut by a formula is two)."""
    everything = [line for block in blocks for line in block]
    formulas: list[Formula] = []
    runs: list[list[Line]] = []
    for block in blocks:
        found, left = _split_block(block, everything, page)
        formulas += found
        runs += left
    formulas, runs = _number_strays(_merge_stacked(formulas, page), runs)
    return _with_pieces(formulas, runs, page)


def _split_block(block: list[Line], everything: list[Line],
                 page: RenderedPage) -> tuple[list[Formula], list[list[Line]]]:
    """One block's formulas (runs of display rows) and the runs of text rows between them."""
    formulas: list[Formula] = []
    runs: list[list[Line]] = [[]]
    display: list[Formula] = []
    for row in _rows(block):
        found = _display_row(row, everything, page)
        if found is not None:
            display.append(found)
            if runs[-1]:
                runs.append([])
            continue
        if display:
            formulas.append(_join(display))
            display = []
        runs[-1].extend(row.lines)
    if display:
        formulas.append(_join(display))
    return formulas, [run for run in runs if run]


def _rows(block: list[Line]) -> list[_Row]:
    """The block's lines grouped by height, top to bottom: lines whose vertical middles fall inside each other."""
    rows: list[list[Line]] = []
    for line in sorted(block, key=lambda line: middle_y(line.bbox)):
        middle = middle_y(line.bbox)
        if rows and any(other.bbox[1] <= middle <= other.bbox[3] for other in rows[-1]):
            rows[-1].append(line)
        else:
            rows.append([line])
    return [_Row(tuple(sorted(row, key=lambda line: line.bbox[0]))) for row in rows]


def _display_row(row: _Row, everything: list[Line], page: RenderedPage) -> Formula | None:
    """The row as a formula (with its number, if it ends in one) when it is math set apart from its column."""
    spans = [span for line in row.lines for span in line.spans]
    if math_weight(spans)[0] < _MIN_MATH:  # most rows: prose, decided before any box is computed
        return None
    em = row.em * page.scale
    boxed = sorted(((span_box(span, page), span) for span in spans), key=lambda item: item[0][0])
    formula, number = _split_number(boxed, em)
    math, prose = math_weight([span for _, span in formula])
    if math < _MIN_MATH or math < _MIN_MATH_SHARE * (math + prose):
        return None
    bbox = union([box for box, _ in formula])
    if not _set_apart(bbox, row, everything, em, page):
        return None
    return Formula(bbox, union([box for box, _ in number]) if number else None)


def _split_number(spans: list[_Boxed], em: float) -> tuple[list[_Boxed], list[_Boxed]]:
    """(formula spans, equation-number spans): a number at either end, an em or more from the rest, is cut off."""
    for k in (1, 2, 3):
        if len(spans) <= k:
            break
        for number, rest in ((spans[-k:], spans[:-k]), (spans[:k], spans[k:])):
            text = "".join(span.text for _, span in number).strip()
            if _EQUATION_NUMBER.match(text) and _gap(number, rest) >= em:
                return rest, number
    return spans, []


def _gap(first: list[_Boxed], second: list[_Boxed]) -> float:
    """Horizontal space between two groups of spans on one row, whichever is on the left."""
    a = union([box for box, _ in first])
    b = union([box for box, _ in second])
    return max(b[0] - a[2], a[0] - b[2])


def _set_apart(bbox: BBox, row: _Row, everything: list[Line], em: float, page: RenderedPage) -> bool:
    """Indented or centred in its column, or with extra space above and below."""
    window = _WINDOW_SHARE * page.height_px
    middle = middle_y(bbox)
    own = {id(line) for line in row.lines}
    column = [line for line in everything if id(line) not in own and line.bbox[0] < bbox[2]
              and line.bbox[2] > bbox[0] and abs(middle_y(line.bbox) - middle) <= window]
    left = min([bbox[0]] + [line.bbox[0] for line in column])
    right = max([bbox[2]] + [line.bbox[2] for line in column])
    if bbox[0] - left >= _INDENT_EM * em and right - bbox[2] >= _INDENT_EM * em:
        return True
    above = max((line.bbox[3] for line in column if line.bbox[3] <= middle), default=None)
    below = min((line.bbox[1] for line in column if line.bbox[1] >= middle), default=None)
    return all(gap is None or gap >= _SPACE_EM * em for gap in (
        None if above is None else bbox[1] - above, None if below is None else below - bbox[3]))


def _join(rows: list[Formula]) -> Formula:
    """Consecutive formula rows as one formula; a number on any of them is the formula's."""
    numbers = [row.number for row in rows if row.number is not None]
    return Formula(union([row.bbox for row in rows]), union(numbers) if numbers else None)


def _merge_stacked(formulas: list[Formula], page: RenderedPage) -> list[Formula]:
    """Formulas PyMuPDF put in separate blocks but that touch vertically and overlap horizontally are one."""
    merged: list[Formula] = []
    for formula in sorted(formulas, key=lambda formula: formula.bbox[1]):
        last = merged[-1] if merged else None
        if last is not None and formula.bbox[1] - last.bbox[3] <= 2 * page.scale and (
                formula.bbox[0] < last.bbox[2] and formula.bbox[2] > last.bbox[0]):
            merged[-1] = _join([last, formula])
        else:
            merged.append(formula)
    return merged


def _number_strays(formulas: list[Formula], runs: list[list[Line]]) -> tuple[list[Formula], list[list[Line]]]:
    """An equation number PyMuPDF made a block of its own joins the formula on its row."""
    numbered = list(formulas)
    kept_runs = []
    for run in runs:
        kept = []
        for line in run:
            target = _formula_beside(line, numbered) if _EQUATION_NUMBER.match(line.text) else None
            if target is None:
                kept.append(line)
            else:
                numbered[target] = replace(numbered[target], number=line.bbox)
        if kept:
            kept_runs.append(kept)
    return numbered, kept_runs


def _formula_beside(line: Line, formulas: list[Formula]) -> int | None:
    """The index of the unnumbered formula whose row holds `line`, to its left or right, if any."""
    middle = middle_y(line.bbox)
    for index, formula in enumerate(formulas):
        beside = line.bbox[0] >= formula.bbox[2] or line.bbox[2] <= formula.bbox[0]
        if formula.number is None and beside and formula.bbox[1] <= middle <= formula.bbox[3]:
            return index
    return None


def _with_pieces(formulas: list[Formula], runs: list[list[Line]],
                 page: RenderedPage) -> tuple[list[Formula], list[list[Line]]]:
    """Runs that are pieces of a formula join it: a sum's limits or a fraction's denominator that PyMuPDF gave a
    block of their own, short and without prose, right above or below a formula and within its width. A piece
    joined may bring the next one in reach (a limit over a limit), so this repeats until nothing joins."""
    formulas, runs = list(formulas), list(runs)
    joined = True
    while joined:
        joined = False
        for run in runs:
            target = _formula_of_piece(run, formulas, page)
            if target is not None:
                formulas[target] = replace(formulas[target], bbox=union([formulas[target].bbox,
                                                                         *(line.bbox for line in run)]))
                runs.remove(run)
                joined = True
                break
    return formulas, runs


def _formula_of_piece(run: list[Line], formulas: list[Formula], page: RenderedPage) -> int | None:
    """The index of the formula `run` is a piece of, if it is one."""
    if any(len(line.text) > _PIECE_CHARS or math_weight(line.spans)[1] for line in run):
        return None
    box = union(line.bbox for line in run)
    reach = _PIECE_REACH_EM * max(line.size for line in run) * page.scale
    middle_x = (box[0] + box[2]) / 2
    for index, formula in enumerate(formulas):
        gap = max(formula.bbox[1] - box[3], box[1] - formula.bbox[3])
        if formula.bbox[0] <= middle_x <= formula.bbox[2] and gap <= reach:
            return index
    return None
