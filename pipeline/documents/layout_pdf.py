"""The `pdf` layout backend: regions from a born-digital page's own structure, with no model and no network.

PyMuPDF already knows where a page's text, images and vector drawings are. This turns them into regions in
PP-DocLayout's vocabulary: tables from ruled grids whose cells hold words and from the horizontal rules of
booktabs-style tables; pictures from placed images and from clusters of drawings (less the panels text sits on,
layout_backdrops.py), with the labels printed around them (axes with numbered ticks make a chart); display formulas
with their equation numbers (layout_formulas.py); running headers, footers and page numbers, decided over the whole
document (layout_furniture.py); and the other text blocks, cut and joined into paragraphs (layout_paragraphs.py),
labelled by font size, weight and place (titles, headings, footnotes, captions). An XY-cut orders them, columns
first, with each equation number after its formula and each caption beside its figure. A page without a text layer
(a scan) or a raster page has no structure to read: it becomes one whole-page `text` region, as with the `page`
backend, so recognition still sees all of it.

Everything is decided on the rendered image's pixels, i.e. the page as displayed, so rotation and crop box are
already applied when "top", "horizontal rule" or "column" are judged.
"""

from __future__ import annotations

import inspect
import re
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise

import pymupdf

from pipeline.documents.layout_backdrops import without_backdrops
from pipeline.documents.layout_contract import BBox, DetectedRegion
from pipeline.documents.layout_formulas import split_formulas
from pipeline.documents.layout_fragments import join_inset_blocks
from pipeline.documents.layout_furniture import Band, band_of, document_furniture
from pipeline.documents.layout_geometry import area, center_inside, distance, middle_y, mostly_inside, next_to, union
from pipeline.documents.layout_order import xy_cut_order
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.layout_paragraphs import paragraphs
from pipeline.documents.layout_plots import holds_plot
from pipeline.documents.layout_text import Line, on_image, text_blocks
from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage

# With pymupdf-layout installed, find_tables first runs that package's ONNX model (~0.4 s a page); this backend
# is model-free and finds ruled tables from the drawn lines alone. Older PyMuPDF has no such switch.
_TABLE_OPTIONS = (
    {"use_layout": False} if "use_layout" in inspect.signature(pymupdf.table.find_tables).parameters else {}
)

_PAGE_NUMBER = re.compile(
    r"^(page\s+)?[-–—(\[]?\s*([0-9]{1,4}|[ivxlcdm]{1,7})\s*[-–—)\]]?(\s*(/|of)\s*[0-9]{1,4})?$", re.IGNORECASE
)
_CAPTION = re.compile(r"^(fig(ure)?|tab(le)?|chart|diagram|plate|abb(ildung)?)\.?\s*[0-9IVX]+", re.IGNORECASE)
_TICK = re.compile(r"^[-−–+]?(\d+([.,]\d+)*|[.,]\d+)\s*%?$")

_BACKGROUND_SHARE = 0.85  # an image or drawing over this share of the page is a background or a frame
_NUMBER_BAND_SHARE = 0.2  # a lone page number may sit up to 20% from the top or bottom edge (LaTeX: ~15%)
_FILLED_CELLS = 0.3  # share of a ruled grid's cells that hold words for it to be a table rather than a plot
_LABEL_REACH_EM = 1.5  # a short block this close to a drawing is one of its labels (tick values, axis titles)
_LABEL_CHARS = 30  # ... when each of its lines is at most this long
_AXIS_SHARE = 0.4  # an axis runs along at least this share of its chart


@dataclass(frozen=True)
class _Text:
    """A text block: lines of one PyMuPDF block that no table, picture, formula or running line took."""

    lines: tuple[Line, ...]

    @property
    def bbox(self) -> BBox:
        return union(line.bbox for line in self.lines)

    @property
    def text(self) -> str:
        return " ".join(line.text for line in self.lines)

    @property
    def size(self) -> float:
        return sum(line.size * line.chars for line in self.lines) / sum(line.chars for line in self.lines)

    @property
    def bold(self) -> bool:
        return all(line.bold for line in self.lines)


@dataclass(frozen=True)
class _Found:
    """A region before ordering; `follower` is read right after it (an equation number after its formula) and
    `anchor` is the figure or table a caption belongs to."""

    bbox: BBox  # pixels
    label: str
    follower: _Found | None = None
    anchor: BBox | None = None


class PdfLayout:
    """Regions of born-digital PDF pages read from the PDF itself; whole-page fallback for scans and images."""

    name = "pdf"

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        pdf_page = source.load() if source.document.is_pdf else None
        if not isinstance(pdf_page, pymupdf.Page):
            return PageLayout().detect(page, source)
        blocks, body_size = text_blocks(pdf_page, page)
        if not blocks:
            return PageLayout().detect(page, source)
        blocks = join_inset_blocks(blocks)
        running, blocks = _running_lines(blocks, page, source)  # never a table's cell or a figure's label
        tables, pictures = _graphics(pdf_page, page, blocks, body_size)
        containers = tables + [found.bbox for found in pictures]
        blocks = _left_as_text(blocks, tables, containers, body_size)
        formulas, runs = split_formulas(blocks, page)
        found = running + [_Found(formula.bbox, "display_formula", _Found(formula.number, "formula_number")
                                  if formula.number else None) for formula in formulas]
        found += _label_texts([_Text(tuple(run)) for run in paragraphs(runs, page)], body_size, page, source.index,
                              containers)
        return _ordered(found + [_Found(box, "table") for box in tables] + pictures, page)


def _left_as_text(blocks: list[list[Line]], tables: list[BBox], containers: list[BBox],
                  body_size: float) -> list[list[Line]]:
    """The blocks less the lines that tables and pictures took: any line in a table, and on a picture the lines of
    other blocks than prose. A paragraph or a title set on a picture (a map's note, a poster's text) stays text."""
    kept_blocks = []
    for block in blocks:
        taken = tables if _reads_as_prose(block, body_size) else containers
        if kept := [line for line in block if not center_inside(line.bbox, taken)]:
            kept_blocks.append(kept)
    return kept_blocks


# --- page furniture --------------------------------------------------------------------------------------------


def _running_lines(blocks: list[list[Line]], page: RenderedPage,
                   source: SourcePage) -> tuple[list[_Found], list[list[Line]]]:
    """Running headers, footers and page numbers as regions, and the blocks without them.

    A line is furniture when it recurs across the document (layout_furniture.py) or is a lone page number near
    the top or bottom edge; anything else there is body text and is labelled as such.
    """
    furniture = document_furniture(source.document)
    found: list[_Found] = []
    kept_blocks = []
    everything = [line for block in blocks for line in block]
    for block in blocks:
        running: dict[Band, list[Line]] = defaultdict(list)
        kept = []
        for line in block:
            band = band_of(line.bbox[1], line.bbox[3], page.height_px)
            if band is not None and furniture.holds(source.index, band, line.text):
                running[band].append(line)
            elif _page_number(line, everything, page):
                found.append(_Found(line.bbox, "number"))
            else:
                kept.append(line)
        found += [_furniture_region(band, lines) for band, lines in running.items()]
        if kept:
            kept_blocks.append(kept)
    return found, kept_blocks


def _furniture_region(band: Band, lines: list[Line]) -> _Found:
    if all(_PAGE_NUMBER.match(line.text) for line in lines):
        return _Found(union(line.bbox for line in lines), "number")
    return _Found(union(line.bbox for line in lines), "header" if band == "top" else "footer")


def _page_number(line: Line, everything: list[Line], page: RenderedPage) -> bool:
    """A number alone on its row near the top or bottom edge (beside a formula or in a table row it is not)."""
    near_edge = line.bbox[3] <= _NUMBER_BAND_SHARE * page.height_px or \
        line.bbox[1] >= (1 - _NUMBER_BAND_SHARE) * page.height_px
    if not near_edge or not _PAGE_NUMBER.match(line.text):
        return False
    middle = middle_y(line.bbox)
    return not any(other is not line and other.bbox[1] <= middle <= other.bbox[3] for other in everything)


# --- tables and pictures ---------------------------------------------------------------------------------------


def _graphics(pdf_page: pymupdf.Page, page: RenderedPage, blocks: list[list[Line]],
              body_size: float) -> tuple[list[BBox], list[_Found]]:
    """The page's tables (ruled areas without plotted data) and its pictures (placed images, drawn figures and
    charts) outside them."""
    lines = [line for block in blocks for line in block]
    drawings = pdf_page.get_drawings()
    tables = _grid_tables(pdf_page, drawings, page, lines)
    tables += [box for box in _rule_tables(drawings, page, lines) if not mostly_inside(box, tables)]
    tables = [box for box in tables if not holds_plot(box, drawings, page)]
    pictures = [_Found(box, "image") for box in _images(pdf_page, page)]
    pictures += _figures(pdf_page, drawings, page, blocks, body_size)
    return tables, [found for found in pictures if not mostly_inside(found.bbox, tables)]


def _grid_tables(pdf_page: pymupdf.Page, drawings: list[dict], page: RenderedPage, lines: list[Line]) -> list[BBox]:
    """Fully ruled tables (at least 2×2 cells, enough of them holding words), found by PyMuPDF from drawn lines.

    A plot's grid is ruled too, but its cells hold curves, not words. find_tables costs tens of milliseconds even
    on a page without a line (it reads every character first), so it runs only when the drawings hold both
    horizontal and vertical edges, which a grid needs.
    """
    if not _has_grid_edges(drawings):
        return []
    try:
        found = pdf_page.find_tables(paths=drawings, **_TABLE_OPTIONS)
    except Exception:  # a table finder tripping on odd vector content costs the tables, not the page's layout
        return []
    boxes = []
    for table in found.tables:
        box = on_image(page, table.bbox)
        if box is not None and table.row_count >= 2 and table.col_count >= 2 and _holds_words(table, page, lines):
            boxes.append(box)
    return boxes


def _holds_words(table: pymupdf.table.Table, page: RenderedPage, lines: list[Line]) -> bool:
    cells = [box for cell in table.cells if cell is not None and (box := on_image(page, cell)) is not None]
    filled = sum(1 for cell in cells if any(center_inside(line.bbox, [cell]) for line in lines))
    return filled >= 2 and filled >= _FILLED_CELLS * len(cells)


def _has_grid_edges(drawings: list[dict]) -> bool:
    horizontal = vertical = 0
    for path in drawings:
        for item in path["items"]:
            if item[0] in ("re", "qu"):
                horizontal, vertical = horizontal + 2, vertical + 2
            elif item[0] == "l":
                horizontal += abs(item[1].y - item[2].y) < 1
                vertical += abs(item[1].x - item[2].x) < 1
    return horizontal >= 3 and vertical >= 2


def _rule_tables(drawings: list[dict], page: RenderedPage, lines: list[Line]) -> list[BBox]:
    """Booktabs-style tables: horizontal rules of one width, with rows of several cells between them.

    Consecutive strips between rules join into one table while each holds tabular rows (or nothing, as between
    the strokes of a double rule); prose or a wide empty strip ends it, so two tables of one width stay apart.
    """
    tables: list[BBox] = []
    for rules in _rule_groups(_horizontal_rules(drawings, page), page):
        run: list[BBox] = []
        for upper, lower in pairwise(rules):
            strip = (min(upper[0], lower[0]), upper[1], max(upper[2], lower[2]), lower[3])
            kind = _strip_kind([line for line in lines if center_inside(line.bbox, [strip])])
            if kind == "tabular" or (kind == "empty" and run and strip[3] - strip[1] <= 6 * page.scale):
                run.append(strip)
            elif run:
                tables.append(union(run))
                run = []
        if run:
            tables.append(union(run))
    return tables


def _horizontal_rules(drawings: list[dict], page: RenderedPage) -> list[BBox]:
    """Thin, long horizontal strokes or filled bars as pixel boxes on the displayed page."""
    thin, long = 3 * page.scale, max(0.15 * page.width_px, 40 * page.scale)
    strokes = (_stroke(item, page) for path in drawings for item in path["items"])
    rules = [box for box in strokes if box is not None and box[3] - box[1] <= thin and box[2] - box[0] >= long]
    return sorted(rules, key=lambda box: box[1])


def _stroke(item: tuple, page: RenderedPage) -> BBox | None:
    """A drawing's straight line or rectangle as a pixel box; None for curves and quads."""
    if item[0] == "l":
        rect = pymupdf.Rect(item[1], item[2]).normalize()
    elif item[0] == "re":
        rect = pymupdf.Rect(item[1])
    else:
        return None
    return on_image(page, tuple(rect), min_side=0.0)


def _rule_groups(rules: list[BBox], page: RenderedPage) -> list[list[BBox]]:
    """Rules grouped by their horizontal extent (same left and right ends), each group top to bottom."""
    tolerance = 6 * page.scale
    groups: list[list[BBox]] = []
    for rule in rules:
        group = next((g for g in groups if abs(g[0][0] - rule[0]) <= tolerance and abs(g[0][2] - rule[2]) <= tolerance),
                     None)
        if group is None:
            groups.append([rule])
        elif rule[1] - group[-1][3] > 2 * page.scale:  # the two strokes of a thick rule are one rule
            group.append(rule)
    return [group for group in groups if len(group) >= 2]


def _strip_kind(lines: list[Line]) -> str:
    """`tabular` when most rows have several cells, `empty` when there is no text, else `prose`."""
    if not lines:
        return "empty"
    rows: list[list[Line]] = []
    for line in sorted(lines, key=lambda line: middle_y(line.bbox)):
        if rows and middle_y(line.bbox) - middle_y(rows[-1][0].bbox) <= (line.bbox[3] - line.bbox[1]) / 2:
            rows[-1].append(line)
        else:
            rows.append([line])
    multi = sum(1 for row in rows if len(row) >= 2)
    return "tabular" if multi >= 1 and 2 * multi >= len(rows) else "prose"


def _images(pdf_page: pymupdf.Page, page: RenderedPage) -> list[BBox]:
    """Boxes of placed raster images, except page backgrounds and specks."""
    boxes = [on_image(page, info["bbox"]) for info in pdf_page.get_image_info()]
    return [box for box in boxes if box is not None and _is_picture_sized(box, page)]


def _figures(pdf_page: pymupdf.Page, drawings: list[dict], page: RenderedPage, blocks: list[list[Line]],
             body_size: float) -> list[_Found]:
    """Clusters of vector drawings that look like a chart or diagram rather than a frame or a shaded box, grown
    over the short labels printed around them; a chart when it has axes and numbered ticks.

    A cluster mostly covered by text is a frame around text (keep the text); one with a little text on it
    (axis labels, say) is a picture.
    """
    lines = [line for block in blocks for line in block]
    drawings = without_backdrops(drawings, [line.bbox for line in lines if not _is_label(line, body_size)], page)
    if not drawings:
        return []
    figures = []
    for rect in pdf_page.cluster_drawings(drawings=drawings):
        box = on_image(page, tuple(rect))
        if box is None or not _is_picture_sized(box, page):
            continue
        if sum(area(line.bbox) for line in lines if center_inside(line.bbox, [box])) < 0.5 * area(box):
            drawn = box
            box = _with_labels(box, blocks, body_size, page)
            figures.append(_Found(box, "chart" if _is_chart(drawn, box, drawings, lines, page) else "image"))
    return figures


def _with_labels(box: BBox, blocks: list[list[Line]], body_size: float, page: RenderedPage) -> BBox:
    """The drawing's box grown over the blocks of short lines beside it (tick values, axis titles, a legend), and
    over labels beside those. Captions, headings and prose stay text."""
    labels = [block for block in blocks if all(_is_label(line, body_size) for line in block)]
    grown = True
    while grown:
        grown = False
        for block in labels:
            block_box = union(line.bbox for line in block)
            reach = _LABEL_REACH_EM * max(line.size for line in block) * page.scale
            dx, dy = distance(box, block_box)
            if dx <= reach and dy <= reach and not _contains(box, block_box):
                box, grown = union([box, block_box]), True
    return box


def _reads_as_prose(block: list[Line], body_size: float) -> bool:
    """Two lines or more that no picture prints as labels, or a line set larger than body text: a paragraph or a
    title, where a long legend entry or an annotation on a chart is one line."""
    return sum(not _is_label(line, body_size) for line in block) >= 2 or any(line.size > 1.1 * body_size
                                                                            for line in block)


def _is_label(line: Line, body_size: float) -> bool:
    """Short, no larger than body text and no caption: what a picture prints on or around itself."""
    return len(line.text) <= _LABEL_CHARS and line.size <= 1.1 * body_size and not _CAPTION.match(line.text)


def _contains(outer: BBox, inner: BBox) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def _is_chart(drawn: BBox, box: BBox, drawings: list[dict], lines: list[Line], page: RenderedPage) -> bool:
    """Axes (a horizontal and a vertical stroke along much of the drawing, or a frame) and numbered ticks."""
    ticks = sum(1 for line in lines if center_inside(line.bbox, [box]) and _TICK.match(line.text))
    if ticks < 2:
        return False
    width, height = drawn[2] - drawn[0], drawn[3] - drawn[1]
    strokes = [stroke for path in drawings for item in path["items"]
               if (stroke := _stroke(item, page)) is not None and center_inside(stroke, [drawn])]
    return any(stroke[2] - stroke[0] >= _AXIS_SHARE * width for stroke in strokes) and \
        any(stroke[3] - stroke[1] >= _AXIS_SHARE * height for stroke in strokes)


# --- labels and order ------------------------------------------------------------------------------------------


def _label_texts(
    texts: list[_Text], body_size: float, page: RenderedPage, page_index: int, pictures: list[BBox]
) -> list[_Found]:
    """A PP-DocLayout label for each text block, from its font, size, text and place on the page."""
    body_bottom = max((text.bbox[3] for text in texts if text.size >= 0.95 * body_size), default=0.0)
    largest = max((text.size for text in texts), default=0.0)
    found = []
    for text in texts:
        label = _text_label(text, body_size, body_bottom, largest, page, page_index)
        anchor = _captioned(text, page, pictures) if label in ("text", "paragraph_title") else None
        found.append(_Found(text.bbox, "figure_title" if anchor else label, anchor=anchor))
    return found


def _text_label(text: _Text, body: float, body_bottom: float, largest: float, page: RenderedPage,
                page_index: int) -> str:
    _, y0, _, _ = text.bbox
    height, lines, size = page.height_px, len(text.lines), text.size
    short = lines <= 3 and len(text.text) <= 150
    if size <= 0.9 * body and y0 >= body_bottom and y0 >= 0.6 * height:
        return "footnote"
    if page_index == 0 and short and size >= 1.5 * body and size >= largest and y0 <= 0.35 * height:
        return "doc_title"
    if short and (size >= 1.25 * body or (text.bold and size >= 0.95 * body and lines <= 2)):
        return "paragraph_title"
    return "text"


def _captioned(text: _Text, page: RenderedPage, pictures: list[BBox]) -> BBox | None:
    """The figure or table a caption-shaped block sits just above or below, if any."""
    if len(text.lines) > 3 or len(text.text) > 150 or not _CAPTION.match(text.text):
        return None
    reach = 3 * text.size * page.scale
    near = [picture for picture in pictures if next_to(text.bbox, picture, reach)]
    return min(near, key=lambda picture: distance(text.bbox, picture)[1], default=None)


def _ordered(found: list[_Found], page: RenderedPage) -> list[DetectedRegion]:
    """Headers first, then the body in XY-cut order (columns first), then footers and page numbers; equation
    numbers right after their formulas, captions right before or after their figure or table."""
    top = sorted((f for f in found if f.label == "header"), key=lambda f: (f.bbox[1], f.bbox[0]))
    bottom = sorted((f for f in found if f.label in ("footer", "number")), key=lambda f: (f.bbox[1], f.bbox[0]))
    body = [f for f in found if f.label not in ("header", "footer", "number")]
    body = _beside_anchors([body[i] for i in xy_cut_order([f.bbox for f in body], min_column_gap=4 * page.scale)])
    flat = [item for f in top + body + bottom for item in ((f, f.follower) if f.follower else (f,))]
    return [DetectedRegion(f.bbox, f.label, 1.0, order) for order, f in enumerate(flat)]


def _beside_anchors(ordered: list[_Found]) -> list[_Found]:
    """Each caption moved next to its anchor: before it when printed above it, after it when below."""
    result = [f for f in ordered if f.anchor is None]
    for caption in (f for f in ordered if f.anchor is not None):
        at = next((i for i, f in enumerate(result) if f.bbox == caption.anchor), len(result))
        result.insert(at + (middle_y(caption.bbox) >= middle_y(caption.anchor)), caption)
    return result


# --- geometry --------------------------------------------------------------------------------------------------


def _is_picture_sized(box: BBox, page: RenderedPage) -> bool:
    """Big enough to be a figure (not a bullet or a rule), small enough not to be the page's background."""
    page_area = float(page.width_px * page.height_px)
    return (
        min(box[2] - box[0], box[3] - box[1]) >= 12 * page.scale
        and 0.005 * page_area <= area(box) <= _BACKGROUND_SHARE * page_area
    )
