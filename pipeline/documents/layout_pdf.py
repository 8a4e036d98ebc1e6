"""The `pdf` layout backend: regions from a born-digital page's own structure, with no model and no network.

PyMuPDF already knows where a page's text, images and vector drawings are. This turns them into regions in
PP-DocLayout's vocabulary: tables from ruled grids and from the horizontal rules of booktabs-style tables,
pictures from placed images and from clusters of drawings, and text blocks labelled by font size, weight and
place on the page (titles, headers, footers, page numbers, footnotes, captions, formulas). An XY-cut orders
them, columns first. A page without a text layer (a scan) or a raster page has no structure to read: it becomes
one whole-page `text` region, as with the `page` backend, so recognition still sees all of it.

Everything is decided on the rendered image's pixels, i.e. the page as displayed, so rotation and crop box are
already applied when "top", "horizontal rule" or "column" are judged.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import pymupdf

from pipeline.documents.ingest import SourcePage
from pipeline.documents.layout import BBox, PageLayout, Region
from pipeline.documents.layout_order import xy_cut_order
from pipeline.documents.render import RenderedPage

_TEXT_FLAGS = pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_IMAGES  # boxes only: never copy image bytes
# With pymupdf-layout installed, find_tables first runs that package's ONNX model (~0.4 s a page); this backend
# is model-free and finds ruled tables from the drawn lines alone. Older PyMuPDF has no such switch.
_TABLE_OPTIONS = (
    {"use_layout": False} if "use_layout" in inspect.signature(pymupdf.table.find_tables).parameters else {}
)

_MATH_FONT = re.compile(r"CMMI|CMSY|CMEX|MSBM|Math|Symbol|STIX", re.IGNORECASE)
_PAGE_NUMBER = re.compile(
    r"^(page\s+)?[-–—(\[]?\s*([0-9]{1,4}|[ivxlcdm]{1,7})\s*[-–—)\]]?(\s*(/|of)\s*[0-9]{1,4})?$", re.IGNORECASE
)
_CAPTION = re.compile(r"^(fig(ure)?|tab(le)?|chart|diagram|plate|abb(ildung)?)\.?\s*[0-9IVX]+", re.IGNORECASE)

_BACKGROUND_SHARE = 0.85  # an image or drawing over this share of the page is a background or a frame
_MARGIN_SHARE = 0.08  # headers and footers live in the top and bottom 8% of the page
_NUMBER_BAND_SHARE = 0.2  # a lone page number may sit up to 20% from the top or bottom edge (LaTeX: ~15%)


@dataclass(frozen=True)
class _Line:
    """One PyMuPDF text line (a table cell is often a line of its own), with its font facts."""

    bbox: BBox  # pixels
    text: str
    chars: int
    size: float  # mean font size in points, weighted by characters
    bold: bool
    math_chars: int


@dataclass(frozen=True)
class _Text:
    """A text block: the lines of one PyMuPDF block that no table or picture took."""

    lines: tuple[_Line, ...]

    @property
    def bbox(self) -> BBox:
        return _union([line.bbox for line in self.lines])

    @property
    def text(self) -> str:
        return " ".join(line.text for line in self.lines)

    @property
    def size(self) -> float:
        return sum(line.size * line.chars for line in self.lines) / sum(line.chars for line in self.lines)

    @property
    def bold(self) -> bool:
        return all(line.bold for line in self.lines)

    @property
    def math(self) -> bool:
        return sum(line.math_chars for line in self.lines) >= 0.6 * sum(line.chars for line in self.lines)


@dataclass(frozen=True)
class _Found:
    bbox: BBox  # pixels
    label: str


class PdfLayout:
    """Regions of born-digital PDF pages read from the PDF itself; whole-page fallback for scans and images."""

    name = "pdf"

    def detect(self, page: RenderedPage, source: SourcePage) -> list[Region]:
        pdf_page = source.load() if source.document.is_pdf else None
        if not isinstance(pdf_page, pymupdf.Page):
            return PageLayout().detect(page, source)
        blocks, body_size = _text_blocks(pdf_page, page)
        if not blocks:
            return PageLayout().detect(page, source)
        lines = [line for block in blocks for line in block]
        drawings = pdf_page.get_drawings()
        tables = _grid_tables(pdf_page, drawings, page)
        tables += [box for box in _rule_tables(drawings, page, lines) if not _mostly_inside(box, tables)]
        pictures = _images(pdf_page, page) + _figures(pdf_page, drawings, page, lines)
        pictures = [box for box in pictures if not _mostly_inside(box, tables)]
        containers = tables + pictures
        texts = [_Text(kept) for block in blocks if (kept := tuple(_outside(block, containers)))]
        labelled = _label_texts(texts, body_size, page, source.index, containers)
        found = labelled + [_Found(box, "table") for box in tables] + [_Found(box, "image") for box in pictures]
        return _ordered(found, page)


def _text_blocks(pdf_page: pymupdf.Page, page: RenderedPage) -> tuple[list[list[_Line]], float]:
    """Each text block's non-empty lines on the image, and the body font size (the most common, by characters)."""
    sizes: Counter[float] = Counter()
    blocks: list[list[_Line]] = []
    for block in pdf_page.get_text("dict", flags=_TEXT_FLAGS)["blocks"]:
        lines = [line for raw in block.get("lines", ()) if (line := _line(raw, page)) is not None]
        if lines:
            blocks.append(lines)
        for line in lines:
            sizes[round(line.size * 2) / 2] += line.chars
    return blocks, (sizes.most_common(1)[0][0] if sizes else 0.0)


def _line(raw: dict, page: RenderedPage) -> _Line | None:
    spans = [span for span in raw["spans"] if span["text"].strip()]
    bbox = _on_image(page, raw["bbox"])
    if not spans or bbox is None:
        return None
    weights = [len(span["text"].strip()) for span in spans]
    return _Line(
        bbox=bbox,
        text=" ".join(span["text"] for span in raw["spans"]).strip(),
        chars=sum(weights),
        size=sum(span["size"] * weight for span, weight in zip(spans, weights, strict=True)) / sum(weights),
        bold=all(span["flags"] & pymupdf.TEXT_FONT_BOLD or "bold" in span["font"].lower() for span in spans),
        math_chars=sum(weight for span, weight in zip(spans, weights, strict=True) if _MATH_FONT.search(span["font"])),
    )


def _outside(lines: list[_Line], containers: list[BBox]) -> list[_Line]:
    """The lines not inside a table or picture (those belong to it: cell text, axis labels)."""
    return [line for line in lines if not _center_inside(line.bbox, containers)]


# --- tables and pictures ---------------------------------------------------------------------------------------


def _grid_tables(pdf_page: pymupdf.Page, drawings: list[dict], page: RenderedPage) -> list[BBox]:
    """Fully ruled tables (at least 2×2 cells), found by PyMuPDF from the drawn lines.

    find_tables costs tens of milliseconds even on a page without a line (it reads every character first), so it
    runs only when the drawings hold both horizontal and vertical edges, which a grid needs.
    """
    if not _has_grid_edges(drawings):
        return []
    try:
        found = pdf_page.find_tables(paths=drawings, **_TABLE_OPTIONS)
    except Exception:  # a table finder tripping on odd vector content costs the tables, not the page's layout
        return []
    boxes = [_on_image(page, table.bbox) for table in found.tables if table.row_count >= 2 and table.col_count >= 2]
    return [box for box in boxes if box is not None]


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


def _rule_tables(drawings: list[dict], page: RenderedPage, lines: list[_Line]) -> list[BBox]:
    """Booktabs-style tables: horizontal rules of one width, with rows of several cells between them.

    Consecutive strips between rules join into one table while each holds tabular rows (or nothing, as between
    the strokes of a double rule); prose or a wide empty strip ends it, so two tables of one width stay apart.
    """
    tables: list[BBox] = []
    for rules in _rule_groups(_horizontal_rules(drawings, page), page):
        run: list[BBox] = []
        for upper, lower in pairwise(rules):
            strip = (min(upper[0], lower[0]), upper[1], max(upper[2], lower[2]), lower[3])
            kind = _strip_kind([line for line in lines if _center_inside(line.bbox, [strip])])
            if kind == "tabular" or (kind == "empty" and run and strip[3] - strip[1] <= 6 * page.scale):
                run.append(strip)
            elif run:
                tables.append(_union(run))
                run = []
        if run:
            tables.append(_union(run))
    return tables


def _horizontal_rules(drawings: list[dict], page: RenderedPage) -> list[BBox]:
    """Thin, long horizontal strokes or filled bars as pixel boxes on the displayed page."""
    thin, long = 3 * page.scale, max(0.15 * page.width_px, 40 * page.scale)
    rules = []
    for path in drawings:
        for item in path["items"]:
            if item[0] == "l":
                rect = pymupdf.Rect(item[1], item[2]).normalize()
            elif item[0] == "re":
                rect = pymupdf.Rect(item[1])
            else:
                continue
            box = _on_image(page, tuple(rect), min_side=0.0)
            if box is not None and box[3] - box[1] <= thin and box[2] - box[0] >= long:
                rules.append(box)
    return sorted(rules, key=lambda box: box[1])


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


def _strip_kind(lines: list[_Line]) -> str:
    """`tabular` when most rows have several cells, `empty` when there is no text, else `prose`."""
    if not lines:
        return "empty"
    rows: list[list[_Line]] = []
    for line in sorted(lines, key=lambda line: (line.bbox[1] + line.bbox[3]) / 2):
        center = (line.bbox[1] + line.bbox[3]) / 2
        if rows and center - (rows[-1][0].bbox[1] + rows[-1][0].bbox[3]) / 2 <= (line.bbox[3] - line.bbox[1]) / 2:
            rows[-1].append(line)
        else:
            rows.append([line])
    multi = sum(1 for row in rows if len(row) >= 2)
    return "tabular" if multi >= 1 and 2 * multi >= len(rows) else "prose"


def _images(pdf_page: pymupdf.Page, page: RenderedPage) -> list[BBox]:
    """Boxes of placed raster images, except page backgrounds and specks."""
    boxes = [_on_image(page, info["bbox"]) for info in pdf_page.get_image_info()]
    return [box for box in boxes if box is not None and _is_picture_sized(box, page)]


def _figures(pdf_page: pymupdf.Page, drawings: list[dict], page: RenderedPage, lines: list[_Line]) -> list[BBox]:
    """Clusters of vector drawings that look like a chart or diagram rather than a frame or a shaded box.

    A cluster mostly covered by text is a frame around text (keep the text); one with a little text on it
    (axis labels, say) is a picture.
    """
    if not drawings:
        return []
    figures = []
    for rect in pdf_page.cluster_drawings(drawings=drawings):
        box = _on_image(page, tuple(rect))
        if box is None or not _is_picture_sized(box, page):
            continue
        text_area = sum(_area(line.bbox) for line in lines if _center_inside(line.bbox, [box]))
        if text_area < 0.5 * _area(box):
            figures.append(box)
    return figures


# --- labels and order ------------------------------------------------------------------------------------------


def _label_texts(
    texts: list[_Text], body_size: float, page: RenderedPage, page_index: int, pictures: list[BBox]
) -> list[_Found]:
    """A PP-DocLayout label for each text block, from its font, size, text and place on the page."""
    body_bottom = max((text.bbox[3] for text in texts if text.size >= 0.95 * body_size), default=0.0)
    largest = max((text.size for text in texts), default=0.0)
    return [
        _Found(text.bbox, _text_label(text, body_size, body_bottom, largest, page, page_index, pictures))
        for text in texts
    ]


def _text_label(
    text: _Text, body: float, body_bottom: float, largest: float, page: RenderedPage, page_index: int,
    pictures: list[BBox],
) -> str:
    _, y0, _, y1 = text.bbox
    height, lines, size = page.height_px, len(text.lines), text.size
    short = lines <= 3 and len(text.text) <= 150
    if _PAGE_NUMBER.match(text.text) and (y1 <= _NUMBER_BAND_SHARE * height or y0 >= (1 - _NUMBER_BAND_SHARE) * height):
        return "number"
    if lines <= 2 and y1 <= _MARGIN_SHARE * height:
        return "header"
    if lines <= 2 and y0 >= (1 - _MARGIN_SHARE) * height:
        return "footer"
    if text.math and lines <= 6:
        return "display_formula"
    if size <= 0.9 * body and y0 >= body_bottom and y0 >= 0.6 * height:
        return "footnote"
    if page_index == 0 and short and size >= 1.5 * body and size >= largest and y0 <= 0.35 * height:
        return "doc_title"
    if short and _CAPTION.match(text.text) and _next_to_any(text.bbox, pictures, 3 * size * page.scale):
        return "figure_title"
    if short and (size >= 1.25 * body or (text.bold and size >= 0.95 * body and lines <= 2)):
        return "paragraph_title"
    return "text"


def _ordered(found: list[_Found], page: RenderedPage) -> list[Region]:
    """Headers first, then the body in XY-cut order (columns first), then footers and page numbers."""
    top = sorted((f for f in found if f.label == "header"), key=lambda f: (f.bbox[1], f.bbox[0]))
    bottom = sorted((f for f in found if f.label in ("footer", "number")), key=lambda f: (f.bbox[1], f.bbox[0]))
    body = [f for f in found if f.label not in ("header", "footer", "number")]
    body = [body[i] for i in xy_cut_order([f.bbox for f in body], min_column_gap=4 * page.scale)]
    return [Region(f.bbox, f.label, 1.0, order) for order, f in enumerate(top + body + bottom)]


# --- geometry --------------------------------------------------------------------------------------------------


def _on_image(page: RenderedPage, bbox_pt: tuple[float, float, float, float], min_side: float = 1.0) -> BBox | None:
    """A page-point box as pixels on the rendered image, cut to the image; None when too little of it is visible."""
    x0, y0, x1, y1 = page.to_pixels(tuple(bbox_pt))
    x0, y0 = max(x0, 0.0), max(y0, 0.0)
    x1, y1 = min(x1, float(page.width_px)), min(y1, float(page.height_px))
    if x1 - x0 < min_side or y1 - y0 < min_side:
        return None
    return (x0, y0, x1, y1)


def _is_picture_sized(box: BBox, page: RenderedPage) -> bool:
    """Big enough to be a figure (not a bullet or a rule), small enough not to be the page's background."""
    page_area = float(page.width_px * page.height_px)
    return (
        min(box[2] - box[0], box[3] - box[1]) >= 12 * page.scale
        and 0.005 * page_area <= _area(box) <= _BACKGROUND_SHARE * page_area
    )


def _union(boxes: list[BBox]) -> BBox:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _area(box: BBox) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _center_inside(box: BBox, containers: list[BBox]) -> bool:
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return any(c[0] <= cx <= c[2] and c[1] <= cy <= c[3] and _area(c) >= _area(box) for c in containers)


def _mostly_inside(box: BBox, containers: list[BBox]) -> bool:
    return any(_intersection(box, c) >= 0.5 * _area(box) for c in containers)


def _intersection(a: BBox, b: BBox) -> float:
    return _area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def _next_to_any(box: BBox, others: list[BBox], distance: float) -> bool:
    """Whether one of `others` lies just above or below `box`, overlapping it horizontally."""
    grown = (box[0], box[1] - distance, box[2], box[3] + distance)
    return any(_intersection(grown, other) > 0 for other in others)
