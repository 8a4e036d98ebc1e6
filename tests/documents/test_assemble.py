"""Assembly: Markdown a reader expects (headings, HTML tables, $$ formulas, no page furniture) and schema-valid JSON."""

from __future__ import annotations

import tomllib
from pathlib import Path

import jsonschema
import pymupdf
import pytest

from pipeline.documents.assemble import (
    SCHEMA_PATH,
    MarkdownOptions,
    document_json,
    document_markdown,
    load_schema,
    page_markdown,
)
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.process import ProcessOptions
from pipeline.documents.results import DocumentOutput, PageOutput, Problem, RegionContent, RegionOutput
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers

SHA = "0" * 64


def region(order: int, label: str, text: str | None = None, html: str | None = None, latex: str | None = None,
           **fields) -> RegionOutput:
    task = fields.pop("task", "ocr")
    source = fields.pop("source", "model" if task else "none")
    return RegionOutput(order, label, 0.9, (10.0, 10.0 + order, 100.0, 20.0 + order),
                        (5.0, 5.0 + order, 50.0, 10.0 + order), task, source, RegionContent(text, html, latex),
                        **fields)


def page(regions: list[RegionOutput], index: int = 0) -> PageOutput:
    return PageOutput(index, "succeeded", 200, 300, 100.0, 150.0, 144.0, 0, "test", regions)


def document(pages: list[PageOutput], status: str = "succeeded") -> DocumentOutput:
    return DocumentOutput("paper.pdf", status, SHA, "application/pdf", 1234, pages, model="tiny",
                          timings_ms={"total": 12.5})


ARTICLE = page([
    region(0, "header", "Journal of Examples, vol. 3"),
    region(1, "doc_title", "A  Study\nof Things"),
    region(2, "paragraph_title", "1 Introduction"),
    region(3, "text", "Things are studied here."),
    region(4, "paragraph_title", "1.2 Method"),
    region(5, "display_formula", "E = mc^2", task="formula", latex="E = mc^2"),
    region(6, "formula_number", "(1)"),
    region(7, "table", "<fcel>a<nl>", task="table", html="<table><tr><td>a</td></tr></table>"),
    region(8, "image", task=None),
    region(9, "inline_formula", "x", task="formula", latex="x"),
    region(10, "footer", "Copyright 2024"),
    region(11, "number", "7"),
])


def test_a_page_reads_as_markdown_with_headings_formulas_tables_and_pictures():
    assert page_markdown(ARTICLE) == "\n\n".join([
        "# A Study of Things",
        "## 1 Introduction",
        "Things are studied here.",
        "### 1.2 Method",
        "$$\nE = mc^2 \\tag{1}\n$$",
        "<table><tr><td>a</td></tr></table>",
        "<!-- image -->",
        "$x$",
    ])


def test_headers_footers_and_page_numbers_are_left_out_unless_asked_for():
    markdown = page_markdown(ARTICLE, MarkdownOptions(exclude=frozenset()))
    assert "Journal of Examples" in markdown and "Copyright 2024" in markdown and "\n\n7" in markdown
    assert "Journal of Examples" not in page_markdown(ARTICLE)


def test_the_words_printed_on_a_picture_are_its_alt_text():
    chart = region(0, "chart", "0 10 20\nZeit [s] -- a\\b", task=None, source="text-layer")
    linked = MarkdownOptions(pictures={(0, 0): "p.pages/page-0001-region-000.png"})
    assert page_markdown(page([chart]), linked) == r"![0 10 20 Zeit \[s\] -- a\\b](p.pages/page-0001-region-000.png)"
    assert page_markdown(page([chart])) == "<!-- chart: 0 10 20 Zeit [s] - - a\\b -->"


def test_a_picture_links_to_its_saved_crop():
    options = MarkdownOptions(pictures={(0, 8): "paper.pages/page-0001-region-008.png"})
    assert "![image](paper.pages/page-0001-region-008.png)" in page_markdown(ARTICLE, options)


def test_failed_and_empty_regions_leave_nothing():
    broken = page([region(0, "text", error=Problem("aspect_ratio", "too thin"), source="none"),
                   region(1, "text", "   "), region(2, "text", "kept")])
    assert page_markdown(broken) == "kept"


def test_a_formula_number_without_a_formula_before_it_stays_text():
    assert page_markdown(page([region(0, "text", "See"), region(1, "formula_number", "(2)")])) == "See\n\n(2)"


def test_the_document_joins_its_pages_and_marks_a_failed_one():
    failed = PageOutput(1, "failed", error=Problem("page_too_large", "too big"))
    doc = document([page([region(0, "text", "one")]), failed, page([region(0, "text", "three")], 2)], "partial")
    assert document_markdown(doc) == "one\n\n<!-- page 2 failed: page_too_large -->\n\nthree\n"


def test_the_schema_is_valid_json_schema_and_ships_with_the_package():
    jsonschema.Draft202012Validator.check_schema(load_schema())
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert SCHEMA_PATH.name in pyproject["tool"]["setuptools"]["package-data"]["pipeline.documents"]


def test_json_of_a_full_page_validates_and_keeps_every_region():
    result = document_json(document([ARTICLE]))
    jsonschema.validate(result, load_schema())
    regions = result["pages"][0]["regions"]
    assert [r["label"] for r in regions][:2] == ["header", "doc_title"]  # excluded from Markdown, not from JSON
    assert regions[5]["latex"] == "E = mc^2" and regions[7]["html"].startswith("<table>")
    assert regions[3]["bbox_px"] == [10.0, 13.0, 100.0, 23.0] and regions[3]["bbox_pt"] == [5.0, 8.0, 50.0, 13.0]
    assert regions[3]["tokens"] == {"prompt": 0, "generated": 0, "cached": 0}
    assert regions[8]["tokens"] is None and regions[8]["task"] is None  # a picture used no model
    assert result["pages"][0]["markdown"] == page_markdown(ARTICLE)


@pytest.mark.parametrize("doc", [
    DocumentOutput("x.pdf", "failed", SHA, None, 10, error=Problem("unsupported_format", "not a PDF")),
    DocumentOutput("gone.pdf", "failed", error=Problem("unreadable", "no such file")),
    document([PageOutput(0, "failed", error=Problem("corrupt", "bad page")), page([], 1)], "partial"),
    document([page([region(0, "text", "from the PDF", source="text-layer")])]),
])
def test_failed_partial_and_text_layer_documents_validate(doc):
    jsonschema.validate(document_json(doc), load_schema())


def test_why_regions_were_skipped_is_said_once_per_document_and_each_region_carries_its_code():
    why = Problem("model_unavailable", "PaddlePaddle/PaddleOCR-VL: not a local directory … " + "x" * 500)
    skipped = [region(order, "text", task="ocr", source="none", error=why, skipped=True) for order in range(3)]
    result = document_json(document([page(skipped), page(skipped, 1)], "partial"))
    jsonschema.validate(result, load_schema())
    assert result["model_error"] == {"code": "model_unavailable", "message": why.message}
    errors = [region["error"] for page in result["pages"] for region in page["regions"]]
    assert {error["code"] for error in errors} == {"model_unavailable"}
    assert all(len(error["message"]) < 100 and "model_error" in error["message"] for error in errors)
    assert str(result).count(why.message) == 1


def test_a_document_nothing_was_skipped_in_has_no_model_error():
    assert document_json(document([ARTICLE]))["model_error"] is None


def test_the_schema_rejects_what_the_pipeline_never_writes():
    result = document_json(document([ARTICLE]))
    result["pages"][0]["regions"][0]["label"] = "banner"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(result, load_schema())


LEFT_COLUMN = ["The first paragraph of the page is short.", "The second paragraph starts in the left column",
               "and runs down to its foot without a sentence", "ending there, so the words go on"]
RIGHT_COLUMN = ["at the head of the right column, where the", "paragraph ends in the middle of the column.",
                "A third paragraph follows it there."]


def two_columns_with_a_paragraph_across() -> bytes:
    """A two-column page whose second paragraph runs from the foot of the left column to the head of the right."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    for x, lines, new_paragraph in ((72, LEFT_COLUMN, 1), (310, RIGHT_COLUMN, 2)):
        for row, line in enumerate(lines):
            page.insert_text((x, 100 + 12 * row + (8 if row >= new_paragraph else 0)), line, fontsize=10)
    return pdf.tobytes()


def test_a_paragraph_across_a_column_break_is_one_markdown_paragraph():
    result = process_document(two_columns_with_a_paragraph_across(), "c.pdf", Answers(), PdfLayout(),
                              ProcessOptions(Limits(dpi=100)))
    paragraphs = [" ".join(block.split()) for block in document_markdown(result).strip().split("\n\n")]
    assert paragraphs == [LEFT_COLUMN[0], " ".join(LEFT_COLUMN[1:] + RIGHT_COLUMN[:2]), RIGHT_COLUMN[2]]


def test_a_text_block_runs_on_into_the_next_only_mid_sentence():
    assert page_markdown(page([region(0, "text", "runs on"), region(1, "text", "and on.")])) == "runs on\nand on."
    assert page_markdown(page([region(0, "text", "Ends."), region(1, "text", "and so.")])) == "Ends.\n\nand so."


def test_a_heading_never_runs_on_into_text():
    assert page_markdown(page([region(0, "paragraph_title", "Results and"), region(1, "text", "more.")])) == \
        "## Results and\n\nmore."


def sections_and_a_definition() -> bytes:
    """A LaTeX-like hierarchy over two pages: numbered sections (14 pt bold) and subsections (12 pt bold), a bold
    run-in heading at the body size ("Definition 8") under a subsection, and an unnumbered section-sized heading."""
    pdf = pymupdf.open()
    headings = [[("1 Metric Spaces", 14), ("1.2 Open Sets", 12), ("Definition 8", 10)],
                [("Definition 9", 10), ("2 Continuity", 14), ("References", 14)]]
    for on_page in headings:
        page = pdf.new_page(width=595, height=842)
        y = 80.0
        for heading, size in on_page:
            page.insert_text((72, y), heading, fontsize=size, fontname="hebo")
            page.insert_textbox(pymupdf.Rect(72, y + 8, 523, y + 80), "Body text of the section, in ten point. " * 8,
                                fontsize=10)
            y += 110
    return pdf.tobytes()


def test_heading_levels_follow_the_numbering_and_a_smaller_unnumbered_heading_sits_below_its_section():
    result = process_document(sections_and_a_definition(), "s.pdf", Answers(), PdfLayout(),
                              ProcessOptions(Limits(dpi=100)))
    headings = [line for line in document_markdown(result).splitlines() if line.startswith("#")]
    assert headings == ["## 1 Metric Spaces", "### 1.2 Open Sets", "#### Definition 8", "#### Definition 9",
                        "## 2 Continuity", "## References"]
    assert result.pages[1].regions[0].label == "paragraph_title"
    assert page_markdown(result.pages[1]).startswith("## Definition 9")  # alone, the page knows no section


def test_headings_without_numbers_are_sections():
    titles = page([region(0, "paragraph_title", "Abstract"), region(1, "text", "Words."),
                   region(2, "paragraph_title", "Results")])
    assert page_markdown(titles) == "## Abstract\n\nWords.\n\n## Results"
