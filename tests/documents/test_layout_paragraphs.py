"""Paragraphs and headings as the pdf backend cuts a page's text blocks: one region per paragraph, however PyMuPDF
grouped its lines."""

from __future__ import annotations

import pymupdf

from pipeline.documents.assemble import document_markdown
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.process import ProcessOptions
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers

LEFT, RIGHT = 72, 523
ENTRY = ("Author, A. and Writer, B. A study of the things that are studied in this field, with a title long enough "
         "to wrap twice, in Proceedings of the Conference on Examples, volume 12, pages 100 to 120, 2020.")


def _markdown_and_labels(data: bytes) -> tuple[str, list[tuple[str, str]]]:
    result = process_document(data, "p.pdf", Answers(), PdfLayout(), ProcessOptions(Limits(dpi=100)))
    [page] = result.pages
    return document_markdown(result), [(region.label, region.content.text or "") for region in page.regions]


def _lines(words: list[str], first_width: float, width: float) -> list[str]:
    """`words` broken greedily into lines of Helvetica 10 pt, the first at most `first_width` wide."""
    lines: list[str] = []
    for word in words:
        limit = first_width if len(lines) == 1 else width
        if lines and _fits(lines[-1], word, limit):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _fits(line: str, word: str, width: float) -> bool:
    return pymupdf.get_text_length(f"{line} {word}", fontsize=10) <= width


def hanging_indents() -> bytes:
    """Three reference-list entries, each a paragraph whose first line is outdented by 18 pt."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    y = 100.0
    for number in range(3):
        for index, line in enumerate(_lines(f"[{number + 1}] {ENTRY}".split(), RIGHT - LEFT, RIGHT - LEFT - 18)):
            page.insert_text((LEFT if index == 0 else LEFT + 18, y), line, fontsize=10)
            y += 12
        y += 8
    return pdf.tobytes()


def test_a_paragraph_with_a_hanging_indent_is_one_region():
    markdown, regions = _markdown_and_labels(hanging_indents())
    assert [label for label, _ in regions] == ["text", "text", "text"]
    for number, (_, text) in enumerate(regions, start=1):
        assert " ".join(text.split()) == f"[{number}] {ENTRY}"
    assert markdown.count("\n\n") == 2  # three Markdown paragraphs, one per entry


def title_over_two_short_lines() -> bytes:
    """A 17 pt title with an author and a date set close under it (PyMuPDF puts all three in one block), then prose."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    page.insert_text((LEFT, 100), "Metric Spaces Explained", fontsize=17)
    page.insert_text((LEFT, 114), "Jane Doe", fontsize=10)
    page.insert_text((LEFT, 126), "June 2024", fontsize=10)
    page.insert_textbox(pymupdf.Rect(LEFT, 160, RIGHT, 400), "Body text of the page, in ten point type. " * 20,
                        fontsize=10)
    assert len(page.get_text("blocks")) == 2  # the title's block holds the two short lines too
    return pdf.tobytes()


def test_a_heading_set_close_above_short_lines_is_a_heading_of_its_own():
    markdown, regions = _markdown_and_labels(title_over_two_short_lines())
    assert regions[:2] == [("doc_title", "Metric Spaces Explained"), ("text", "Jane Doe\nJune 2024")]
    assert markdown.startswith("# Metric Spaces Explained\n\nJane Doe\nJune 2024\n\nBody text")
