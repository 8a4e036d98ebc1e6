"""A born-digital page's text lines as the pdf backend reads them: boxes on the rendered image and font facts.

PyMuPDF groups characters into spans (one font), lines and blocks. The backend labels blocks, but some questions
are about lines (is this line a running header?) and some about spans (which part of a line is math, and which
is its equation number), so each line keeps its spans.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

import pymupdf

from pipeline.documents.layout_contract import BBox
from pipeline.documents.render import RenderedPage

# Boxes only (never copy image bytes), and ligatures as their letters: MuPDF keeps ﬀ, ﬁ, ﬂ, ﬃ as one code point
# otherwise, which search and readers do not match, and then inserts no space after a word that ends in one.
TEXT_FLAGS = pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_IMAGES & ~pymupdf.TEXT_PRESERVE_LIGATURES
WORD_FLAGS = pymupdf.TEXTFLAGS_WORDS & ~pymupdf.TEXT_PRESERVE_LIGATURES  # the same for get_text("words")
# Math fonts of TeX (Computer/Latin Modern, AMS, newtx/newpx, MathTime), OpenType math fonts and Symbol.
_MATH_FONT = re.compile(
    r"CMMI|CMSY|CMEX|CMBSY|MSAM|MSBM|EUFM|EURM|RSFS|LMMI|LMSY|LMEX|[TP]XMI|[TP]XSY|[TP]XEX|MTMI|MTSY|MTEX|"
    r"Math|Symbol|STIX|esint|wasy|stmary",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W\d_]{2,}")
# Math symbols in any font: ASCII relations and operators, Latin-1's ¬ ± × ÷, Greek, arrows, the blocks of math
# operators and math alphanumerics.
_MATH_SYMBOL = re.compile("[+<=>|~¬±×÷\u0370-\u03ff\u2190-\u21ff\u2200-\u22ff\u27c0-\u27ef\u2980-\u2aff"
                          "\U0001d400-\U0001d7ff]")
# Function names set upright in formulas: words in a text font that are still math.
_OPERATORS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh",
                        "tanh", "log", "ln", "lg", "exp", "lim", "liminf", "limsup", "max", "min", "sup", "inf",
                        "det", "dim", "ker", "deg", "gcd", "mod", "arg", "Pr", "id", "im", "rank", "tr", "diag"})


@dataclass(frozen=True)
class Span:
    """A run of one font on a line; its box stays in page points until a formula needs it (`span_box`)."""

    bbox_pt: BBox
    text: str
    math_font: bool


@dataclass(frozen=True)
class Line:
    """One PyMuPDF text line (a table cell is often a line of its own), with its spans and font facts."""

    bbox: BBox  # pixels
    text: str
    spans: tuple[Span, ...]  # the non-blank ones
    chars: int
    size: float  # mean font size in points, weighted by characters
    bold: bool


def text_blocks(pdf_page: pymupdf.Page, page: RenderedPage) -> tuple[list[list[Line]], float]:
    """Each text block's non-empty lines on the image, and the body font size (the most common, by characters)."""
    sizes: Counter[float] = Counter()
    blocks: list[list[Line]] = []
    for block in pdf_page.get_text("dict", flags=TEXT_FLAGS)["blocks"]:
        lines = [line for raw in block.get("lines", ()) if (line := _line(raw, page)) is not None]
        if lines:
            blocks.append(lines)
        for line in lines:
            sizes[round(line.size * 2) / 2] += line.chars
    return blocks, (sizes.most_common(1)[0][0] if sizes else 0.0)


def line_text(raw_line: dict) -> str:
    """A PyMuPDF line's text as the backend reads it: its spans joined by spaces, stripped."""
    return " ".join(span["text"] for span in raw_line["spans"]).strip()


def math_weight(spans: tuple[Span, ...] | list[Span]) -> tuple[int, int]:
    """(math, prose) characters: math-font glyphs and math symbols against the letters of words in text fonts.

    Digits, brackets, punctuation and lone letters count as neither: they are as common in formulas as in prose
    (and in a table of contents, whose dot leaders TeX takes from a math font).
    """
    math = prose = 0
    for span in spans:
        if span.math_font:
            math += sum(1 for char in span.text if not char.isspace() and unicodedata.category(char)[0] != "P")
            continue
        math += len(_MATH_SYMBOL.findall(span.text))
        prose += sum(len(word) for word in _WORD.findall(span.text) if word not in _OPERATORS and not _greek(word))
    return math, prose


def _greek(text: str) -> bool:
    return all(0x0370 <= ord(char) <= 0x03FF for char in text)


def _line(raw: dict, page: RenderedPage) -> Line | None:
    spans = [span for span in raw["spans"] if span["text"].strip()]
    bbox = on_image(page, raw["bbox"])
    if not spans or bbox is None:
        return None
    weights = [len(span["text"].strip()) for span in spans]
    return Line(
        bbox=bbox,
        text=line_text(raw),
        spans=tuple(Span(span["bbox"], span["text"], bool(_MATH_FONT.search(span["font"]))) for span in spans),
        chars=sum(weights),
        size=sum(span["size"] * weight for span, weight in zip(spans, weights, strict=True)) / sum(weights),
        bold=all(span["flags"] & pymupdf.TEXT_FONT_BOLD or "bold" in span["font"].lower() for span in spans),
    )


def span_box(span: Span, page: RenderedPage) -> BBox:
    """The span's box in pixels, cut to the rendered image (its line is on it, so some of the span is too)."""
    x0, y0, x1, y1 = page.to_pixels(span.bbox_pt)
    width, height = float(page.width_px), float(page.height_px)
    return (min(max(x0, 0.0), width), min(max(y0, 0.0), height), min(max(x1, 0.0), width), min(max(y1, 0.0), height))


def on_image(page: RenderedPage, bbox_pt: tuple[float, float, float, float], min_side: float = 1.0) -> BBox | None:
    """A page-point box as pixels on the rendered image, cut to the image; None when too little of it is visible."""
    x0, y0, x1, y1 = page.to_pixels(tuple(bbox_pt))
    x0, y0 = max(x0, 0.0), max(y0, 0.0)
    x1, y1 = min(x1, float(page.width_px)), min(y1, float(page.height_px))
    if x1 - x0 < min_side or y1 - y0 < min_side:
        return None
    return (x0, y0, x1, y1)
