"""From laid-out regions to recognition work: which task each region gets, its crop, and the text-layer shortcut.

A region's label decides its task; picture kinds get none and are kept as pictures, with the words a PDF prints on
them (a chart's axis labels, a diagram's captions) so no text of the page is lost with the picture. Crops take a
small margin so glyphs touching the detected box are not clipped. On born-digital PDF pages a text region can skip
the model altogether when the PDF's own text layer explains everything visible in it: that is exact (no OCR
errors) and free. It is only trusted when it is clearly complete: no image under the region (a scan with an OCR
layer goes to the model), no unmapped glyphs, and nearly all dark pixels of the region inside the text layer's
word boxes (text drawn as curves, figures and white-on-dark text all fail that test and go to the model). The
pixels are the page's own, seen through highlights and other text markup (page_ink.py). Each word is read once,
by the text region that holds most of it, however their boxes overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pymupdf
from PIL import Image

from pipeline.documents.layout_contract import BBox, DetectedRegion
from pipeline.documents.layout_geometry import intersection, middle_y
from pipeline.documents.layout_text import WORD_FLAGS
from pipeline.documents.page_ink import page_grey
from pipeline.documents.render import RenderedPage

TextLayerMode = Literal["auto", "off"]

# Labels kept as pictures: cropped and linked, never recognised.
PICTURE_LABELS: frozenset[str] = frozenset({"image", "header_image", "footer_image"})
_TASKS = {"table": "table", "display_formula": "formula", "inline_formula": "formula", "chart": "chart",
          "seal": "seal"}

INK_LEVEL = 160  # a grey level below this is ink (anti-aliased glyph edges included)
_WORD_PAD_PT = 1.0  # word boxes are grown by this much before the ink test: glyphs overshoot their box a little
_MAX_IMAGE_OVERLAP = 0.1  # share of a region an embedded image may cover before its text layer is distrusted
_MAX_UNREADABLE = 0.02  # share of private-use or control characters that marks a font without a text mapping


@dataclass(frozen=True)
class RegionOptions:
    """How regions become work; defaults recognise text, tables and formulas and use the text layer."""

    crop_margin_pt: float = 2.0
    text_layer: TextLayerMode = "auto"
    text_layer_min_coverage: float = 0.9  # share of a region's ink the text layer's words must cover
    recognize_charts: bool = False
    recognize_seals: bool = False
    tasks: frozenset[str] | None = None  # when set, a region whose task is not in it is kept as a picture


@dataclass(frozen=True)
class PreparedRegion:
    """A region and what to do with it: `task` None is a picture (`text`: the words printed on it, if any); `text`
    set on any other region means the text layer answered."""

    region: DetectedRegion
    task: str | None
    crop_box: tuple[int, int, int, int] | None  # pixels, margin included; None for a box outside the page
    text: str | None = None

    @property
    def needs_model(self) -> bool:
        return self.task is not None and self.text is None and self.crop_box is not None


def task_for(label: str, options: RegionOptions) -> str | None:
    """The recognition task for a label, or None for regions kept as pictures."""
    if label in PICTURE_LABELS:
        return None
    task = _TASKS.get(label, "ocr")
    if task == "chart" and not options.recognize_charts or task == "seal" and not options.recognize_seals:
        return None
    if options.tasks is not None and task not in options.tasks:
        return None
    return task


def crop_box(page: RenderedPage, bbox: BBox, margin_pt: float) -> tuple[int, int, int, int] | None:
    """The region's box grown by the margin, rounded outward and clamped to the page; None when nothing is left."""
    margin = margin_pt * page.scale
    x0, y0, x1, y1 = bbox
    box = (max(0, math.floor(min(x0, x1) - margin)), max(0, math.floor(min(y0, y1) - margin)),
           min(page.width_px, math.ceil(max(x0, x1) + margin)), min(page.height_px, math.ceil(max(y0, y1) + margin)))
    return box if box[2] > box[0] and box[3] > box[1] else None


def crop(page: RenderedPage, box: tuple[int, int, int, int]) -> Image.Image:
    """The pixels of `box` (from crop_box) as a new image."""
    return page.image.crop(box)


def prepare_regions(page: RenderedPage, regions: list[DetectedRegion], options: RegionOptions,
                    pdf_page: pymupdf.Page | None = None) -> list[PreparedRegion]:
    """Task, crop box and (for born-digital text on a PDF page, when enabled) text-layer text for each region."""
    reader = None
    if pdf_page is not None and options.text_layer == "auto":
        reader = _TextLayer(page, pdf_page, [region.bbox for region in regions
                                             if task_for(region.label, options) == "ocr"])
    prepared = []
    for region in regions:
        task = task_for(region.label, options)
        box = crop_box(page, region.bbox, options.crop_margin_pt)
        text = None
        if reader is not None and task == "ocr" and box is not None:
            text = reader.text(region.bbox, options.text_layer_min_coverage)
        elif reader is not None and task is None:
            text = reader.printed_on(region.bbox)
        prepared.append(PreparedRegion(region, task, box, text))
    return prepared


class _TextLayer:
    """A PDF page's text layer, read region by region against its rendered image."""

    def __init__(self, page: RenderedPage, pdf_page: pymupdf.Page, text_boxes: list[BBox]) -> None:
        self.page = page
        self.clips = [page.to_points(box) for box in text_boxes]  # the text regions, in page points
        self.grey = page_grey(page, pdf_page)
        self.images = [pymupdf.Rect(info["bbox"]) for info in pdf_page.get_image_info()]
        self.to_display = pdf_page.rotation_matrix
        if pdf_page.rotation:
            self.words = reading_order(pdf_page.get_text("words", flags=WORD_FLAGS), pdf_page.rotation_matrix)
        else:
            self.words = pdf_page.get_text("words", flags=WORD_FLAGS, sort=True)

    def text(self, bbox: BBox, min_coverage: float) -> str | None:
        """The region's text from the text layer, or None when the layer does not clearly cover the region."""
        clip = pymupdf.Rect(self.page.to_points(bbox))
        if clip.is_empty or any(_overlap(image, clip) > _MAX_IMAGE_OVERLAP for image in self.images):
            return None
        words = self._words(clip)
        own = [word for word in words if self._holds_most(self.page.to_points(bbox), word)]
        text = join_words(own, self.to_display) if own else ""
        if not text or not _readable(text):
            return None
        if self._ink_coverage(bbox, words) >= min_coverage:
            return text
        return text if self._ink_coverage(bbox, words + self._lines_beside(bbox)) >= min_coverage else None

    def printed_on(self, bbox: BBox) -> str | None:
        """The text-layer words on a picture, or None when it has none (a photo, or an unreadable font); words that
        a text region on it reads (a paragraph set over a drawing) are that region's, not the picture's.

        No ink test here: a picture's ink is its drawing, which no word box covers."""
        clip = pymupdf.Rect(self.page.to_points(bbox))
        words = [word for word in self._words(clip) if not any(_holds(other, word) for other in self.clips)]
        text = join_words(words, self.to_display) if words else ""
        return text if text and _readable(text) else None

    def _words(self, clip: pymupdf.Rect) -> list[tuple]:
        """The words whose centre lies in `clip`: a line cut by two neighbouring boxes is read once and no word is
        split (MuPDF's own clip works per character)."""
        box = tuple(clip)
        return [word for word in self.words if _holds(box, word)]

    def _holds_most(self, clip: BBox, word: tuple) -> bool:
        """Whether of the text regions whose boxes hold the word's middle, this one holds most of the word (the
        first in reading order on a tie): where boxes overlap, as a subscript hanging into the next line's box
        makes them, the word is read once, not in both. Its ink still counts as explained in either."""
        holders = [other for other in self.clips if _holds(other, word)]
        return max(holders, key=lambda other: intersection(word[:4], other), default=clip) == clip

    def _lines_beside(self, bbox: BBox) -> list[tuple]:
        """Words of the lines above and below whose edges the box takes in (their middles lie outside its height, as
        displayed): their ink is theirs, read in their own regions. A word cut at the box's side is not one."""
        boxes = ((word, self.page.to_pixels(word[:4])) for word in self.words)
        return [word for word, box in boxes if intersection(box, bbox) > 0 and not bbox[1] <= middle_y(box) <= bbox[3]]

    def _ink_coverage(self, bbox: BBox, words: list[tuple]) -> float:
        """Share of the region's dark pixels inside the (padded) word boxes; 0 for a region with no ink."""
        x0, y0 = max(0, math.floor(bbox[0])), max(0, math.floor(bbox[1]))
        x1, y1 = min(self.page.width_px, math.ceil(bbox[2])), min(self.page.height_px, math.ceil(bbox[3]))
        ink = self.grey[y0:y1, x0:x1] < INK_LEVEL
        total = int(ink.sum())
        if total == 0:
            return 0.0
        covered = np.zeros_like(ink)
        for word in words:
            x, y, right, bottom = word[:4]
            wx0, wy0, wx1, wy1 = self.page.to_pixels((x - _WORD_PAD_PT, y - _WORD_PAD_PT,
                                                      right + _WORD_PAD_PT, bottom + _WORD_PAD_PT))
            covered[max(0, math.floor(wy0) - y0):max(0, math.ceil(wy1) - y0),
                    max(0, math.floor(wx0) - x0):max(0, math.ceil(wx1) - x0)] = True
        return int((ink & covered).sum()) / total


def join_words(words: list[tuple], to_display: pymupdf.Matrix = pymupdf.Identity) -> str:
    """PyMuPDF words (x0, y0, x1, y1, text, block, line, word) → lines of text; a hyphen at a line end is joined.

    A PyMuPDF line that goes on the row of the one before, right of it (a contents entry's number, title, leaders
    and page; a tab-separated term and its value), continues its line of text. `to_display` maps word boxes onto
    the page as shown, where rows run left to right."""
    lines: list[str] = []
    current: list[str] = []
    key = row = None
    for word in words:
        box = pymupdf.Rect(word[:4]) * to_display
        if (word[5], word[6]) != key and current and not _continues_row(row, box):
            lines.append(" ".join(current))
            current, row = [], None
        key = (word[5], word[6])
        current.append(word[4])
        row = box if row is None else row | box
    if current:
        lines.append(" ".join(current))
    text = ""
    for line in lines:
        if text.endswith("-") and line[:1].islower() and len(text) > 1 and text[-2].isalpha():
            text = text[:-1] + line
        else:
            text = f"{text}\n{line}" if text else line
    return text


def _continues_row(row: pymupdf.Rect | None, box: pymupdf.Rect) -> bool:
    return row is not None and row.y0 <= (box.y0 + box.y1) / 2 <= row.y1 and box.x0 >= row.x1


def reading_order(words: list[tuple], to_display: pymupdf.Matrix, tolerance: float = 3.0) -> list[tuple]:
    """PyMuPDF words of a page shown rotated, in reading order: each text line's words as the line runs, and the
    lines top to bottom, left to right as displayed (lines whose tops or bottoms are within `tolerance` points
    share a row).

    PyMuPDF's own `sort=True` orders words by position in the unrotated page's space, which reads the upright
    lines of a landscape page shown with /Rotate 90 backwards; a line's words are in order whatever its angle.
    """
    lines: dict[tuple[int, int], list[tuple]] = {}
    for word in words:
        lines.setdefault((word[5], word[6]), []).append(word)
    shown = sorted(((pymupdf.Rect(_union_of(line)) * to_display, sorted(line, key=lambda word: word[7]))
                    for line in lines.values()), key=lambda item: (item[0].y1, item[0].x0))
    ordered: list[tuple] = []
    row: list[tuple[pymupdf.Rect, list[tuple]]] = []
    top = bottom = 0.0
    for box, line in shown:
        if row and (abs(box.y0 - top) <= tolerance or abs(box.y1 - bottom) <= tolerance):
            row.append((box, line))
            top, bottom = min(top, box.y0), max(bottom, box.y1)
            continue
        ordered.extend(word for _, each in sorted(row, key=lambda item: item[0].x0) for word in each)
        row, top, bottom = [(box, line)], box.y0, box.y1
    ordered.extend(word for _, each in sorted(row, key=lambda item: item[0].x0) for word in each)
    return ordered


def _holds(box: BBox, word: tuple) -> bool:
    """Whether the word's middle lies in `box` (page points; half-open, as MuPDF's own test of a point in a rect)."""
    x, y = (word[0] + word[2]) / 2, (word[1] + word[3]) / 2
    return box[0] <= x < box[2] and box[1] <= y < box[3]


def _union_of(words: list[tuple]) -> tuple[float, float, float, float]:
    return (min(w[0] for w in words), min(w[1] for w in words), max(w[2] for w in words), max(w[3] for w in words))


def _readable(text: str) -> bool:
    """False for text from a font without a Unicode mapping (U+FFFD, private-use or control characters)."""
    if "\ufffd" in text:
        return False
    bad = sum(1 for char in text if (0xE000 <= ord(char) <= 0xF8FF) or (ord(char) < 32 and char not in "\n\t"))
    return bad <= _MAX_UNREADABLE * len(text)


def _overlap(image: pymupdf.Rect, clip: pymupdf.Rect) -> float:
    """Share of `clip`'s area covered by `image`."""
    inter = pymupdf.Rect(image) & clip
    return 0.0 if inter.is_empty else inter.get_area() / clip.get_area()
