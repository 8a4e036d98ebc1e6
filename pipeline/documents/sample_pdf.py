"""A small born-digital PDF with one of each kind of region, written on demand for `quire demo`.

Generated rather than shipped, so the demo shows the main job on any machine: a title and paragraphs the text layer
serves, a ruled table and a formula that go to the model, and a picture kept as a crop, over two pages.
"""

from __future__ import annotations

import io
from pathlib import Path

import pymupdf
from PIL import Image, ImageDraw

_PARAGRAPHS = [
    "Quire turns scanned and born-digital documents into Markdown and JSON. This page was written by PyMuPDF, so "
    "its text has a text layer: these lines come from the PDF itself, exactly, without the model.",
    "The table and the formula below are read by PaddleOCR-VL, the picture on the next page is kept as a crop.",
]
_TABLE = [["Stage", "Runs on", "Model"], ["ingest", "CPU", "no"], ["layout", "CPU or GPU", "optional"],
          ["recognition", "GPU", "PaddleOCR-VL"]]


def write_sample_pdf(path: Path) -> Path:
    """Write the two-page sample to `path` (its folder is created) and return it."""
    document = pymupdf.open()
    _first_page(document.new_page(width=595, height=842))
    _second_page(document.new_page(width=595, height=842))
    path.parent.mkdir(parents=True, exist_ok=True)
    document.save(path)
    document.close()
    return path


def _first_page(page: pymupdf.Page) -> None:
    page.insert_text((72, 90), "A sample report", fontname="hebo", fontsize=22)
    _paragraphs(page, 130)
    _table(page, top=260)
    page.insert_text((220, 470), "a + b = g", fontname="Symbol", fontsize=16)  # α + β = γ in the Symbol font
    page.insert_text((72, 800), "1", fontname="helv", fontsize=9)


def _second_page(page: pymupdf.Page) -> None:
    page.insert_text((72, 90), "A picture", fontname="hebo", fontsize=16)
    page.insert_image(pymupdf.Rect(72, 110, 372, 335), stream=_picture())
    page.insert_text((72, 355), "Figure 1. A chart drawn as an image.", fontname="helv", fontsize=10)
    _paragraphs(page, 390)
    page.insert_text((72, 800), "2", fontname="helv", fontsize=9)


def _paragraphs(page: pymupdf.Page, top: float) -> None:
    for index, text in enumerate(_PARAGRAPHS):
        page.insert_textbox(pymupdf.Rect(72, top + 55 * index, 523, top + 55 * index + 50), text,
                            fontname="helv", fontsize=11)


def _table(page: pymupdf.Page, top: float, row_height: float = 24.0) -> None:
    widths = [150.0, 150.0, 151.0]
    lefts = [72.0 + sum(widths[:i]) for i in range(len(widths) + 1)]
    bottom = top + row_height * len(_TABLE)
    for row in range(len(_TABLE) + 1):
        page.draw_line((lefts[0], top + row * row_height), (lefts[-1], top + row * row_height), width=0.8)
    for left in lefts:
        page.draw_line((left, top), (left, bottom), width=0.8)
    for row, cells in enumerate(_TABLE):
        for column, cell in enumerate(cells):
            page.insert_text((lefts[column] + 6, top + row * row_height + 16), cell,
                             fontname="hebo" if row == 0 else "helv", fontsize=10)


def _picture() -> bytes:
    image = Image.new("RGB", (600, 450), "white")
    draw = ImageDraw.Draw(image)
    for index, height in enumerate([120, 260, 190, 330, 280]):
        draw.rectangle((60 + index * 105, 400 - height, 130 + index * 105, 400), fill=(60, 110 + index * 25, 200))
    draw.line((40, 400, 580, 400), fill="black", width=3)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
