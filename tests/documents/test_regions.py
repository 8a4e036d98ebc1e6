"""Regions become recognition work: a task per label, a crop with a margin, and the PDF text layer where it is safe."""

from __future__ import annotations

import io

import pymupdf
import pytest
from PIL import Image

from pipeline.documents.layout_contract import LABELS, DetectedRegion
from pipeline.documents.recognizer import task_prompt
from pipeline.documents.regions import (
    RegionOptions,
    crop,
    crop_box,
    join_words,
    prepare_regions,
    task_for,
)
from pipeline.documents.render import render_page
from pipeline.documents.source import Limits, ingest
from tests.documents.samples import corpus_bytes

DEFAULTS = RegionOptions()


@pytest.mark.parametrize(("label", "prompt"), [
    ("table", "Table Recognition:"),
    ("display_formula", "Formula Recognition:"),
    ("inline_formula", "Formula Recognition:"),
    ("text", "OCR:"),
    ("paragraph_title", "OCR:"),
    ("doc_title", "OCR:"),
    ("footnote", "OCR:"),
    ("formula_number", "OCR:"),
    ("vertical_text", "OCR:"),
])
def test_each_label_gets_its_task_prompt(label, prompt):
    assert task_prompt(task_for(label, DEFAULTS)) == prompt


@pytest.mark.parametrize("label", ["image", "header_image", "footer_image", "chart", "seal"])
def test_pictures_charts_and_seals_are_kept_as_pictures_by_default(label):
    assert task_for(label, DEFAULTS) is None


def test_charts_and_seals_are_recognised_when_asked_for():
    options = RegionOptions(recognize_charts=True, recognize_seals=True)
    assert task_prompt(task_for("chart", options)) == "Chart Recognition:"
    assert task_prompt(task_for("seal", options)) == "Seal Recognition:"


def test_every_layout_label_has_a_decision():
    assert all(task_for(label, DEFAULTS) in {None, "ocr", "table", "formula"} for label in LABELS)


def _pdf_page(draw, dpi: int = 72):
    """Render a one-page PDF drawn by `draw(page)`; at 72 dpi pixels and points coincide."""
    pdf = pymupdf.open()
    draw(pdf.new_page(width=300, height=200))
    document = ingest(pdf.tobytes(), Limits(dpi=dpi))
    source = next(document.pages())
    return render_page(source), source.load()


def _text(page):
    page.insert_text((20, 40), "Hello quire world", fontsize=14)


def test_a_crop_takes_the_margin_in_points_and_stays_on_the_page():
    page, _ = _pdf_page(_text, dpi=144)  # 2 pixels per point
    assert crop_box(page, (100, 100, 200, 150), margin_pt=2.0) == (96, 96, 204, 154)
    assert crop_box(page, (-50, -50, 10, 10), margin_pt=2.0) == (0, 0, 14, 14)
    assert crop_box(page, (700, 500, 800, 600), margin_pt=2.0) is None  # wholly outside the 600×400 image
    assert crop(page, (96, 96, 204, 154)).size == (108, 58)


def test_a_born_digital_text_region_takes_the_text_layer_and_skips_the_model():
    page, pdf_page = _pdf_page(_text)
    [item] = prepare_regions(page, [DetectedRegion((10, 20, 200, 50), "text", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.text == "Hello quire world"
    assert item.task == "ocr" and not item.needs_model


def test_the_text_layer_is_not_used_when_switched_off_or_without_a_pdf_page():
    page, pdf_page = _pdf_page(_text)
    region = DetectedRegion((10, 20, 200, 50), "text", 0.9, 0)
    assert prepare_regions(page, [region], RegionOptions(text_layer="off"), pdf_page)[0].needs_model
    assert prepare_regions(page, [region], DEFAULTS)[0].needs_model


def test_tables_and_formulas_always_go_to_the_model_even_with_a_text_layer():
    page, pdf_page = _pdf_page(_text)
    regions = [DetectedRegion((10, 20, 200, 50), "table", 0.9, 0),
               DetectedRegion((10, 20, 200, 50), "display_formula", 0.9, 1)]
    assert all(item.needs_model for item in prepare_regions(page, regions, DEFAULTS, pdf_page))


def test_ink_outside_the_words_sends_the_region_to_the_model():
    def text_and_figure(page):
        _text(page)
        page.draw_rect(pymupdf.Rect(20, 60, 120, 140), color=(0, 0, 0), fill=(0, 0, 0))

    page, pdf_page = _pdf_page(text_and_figure)
    [item] = prepare_regions(page, [DetectedRegion((10, 20, 200, 150), "text", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.text is None and item.needs_model


def test_text_over_an_embedded_image_goes_to_the_model():
    """A scan with an OCR text layer: the model reads better than the scanner's OCR did."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (250, 250, 250)).save(buffer, format="PNG")

    def scanned(page):
        page.insert_image(pymupdf.Rect(0, 0, 300, 200), stream=buffer.getvalue())
        _text(page)

    page, pdf_page = _pdf_page(scanned)
    [item] = prepare_regions(page, [DetectedRegion((10, 20, 200, 50), "text", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.needs_model


def test_a_word_cut_by_a_box_edge_belongs_to_the_box_holding_its_centre():
    page, pdf_page = _pdf_page(_text)
    quire = next(word for word in pdf_page.get_text("words") if word[4] == "quire")
    edge = quire[0] + 0.75 * (quire[2] - quire[0])  # most of "quire" lies left of the edge
    left = DetectedRegion((10, 20, edge, 50), "text", 0.9, 0)
    right = DetectedRegion((edge, 20, 200, 50), "text", 0.9, 1)
    texts = [item.text for item in prepare_regions(page, [left, right], DEFAULTS, pdf_page)]
    assert texts[0] == "Hello quire"
    assert texts[1] is None  # the tail of "quire" is ink its own words do not explain: the model reads it


def test_a_box_taking_in_the_foot_of_the_line_above_still_reads_its_own_line_from_the_text_layer():
    def two_lines(page):
        page.insert_text((20, 40), "Some text above", fontsize=14)
        page.insert_text((20, 54), "Another line below", fontsize=14)

    page, pdf_page = _pdf_page(two_lines)
    [item] = prepare_regions(page, [DetectedRegion((10, 35, 200, 60), "text", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.text == "Another line below"  # the glyph feet above are their own words' ink, read in their region


def test_a_subscript_whose_middle_two_regions_hold_is_read_once_by_the_one_holding_more_of_it():
    def tight_lines(page):
        page.insert_text((20, 40), "the value of x", fontsize=12)
        page.insert_text((95, 44), "max", fontsize=8)  # its middle lies in the next line's box too, as in TeX
        page.insert_text((20, 53), "Next paragraph", fontsize=12)

    page, pdf_page = _pdf_page(tight_lines)
    above, below = ([word[:4] for word in pdf_page.get_text("words") if word[4] in words] for words in
                    (("the", "max"), ("Next", "paragraph")))
    regions = [DetectedRegion((above[0][0], above[0][1], above[1][2], above[1][3]), "text", 1.0, 0),
               DetectedRegion((below[0][0], below[0][1], below[1][2], below[1][3]), "text", 1.0, 1)]
    assert [item.text for item in prepare_regions(page, regions, DEFAULTS, pdf_page)] == [
        "the value of x max", "Next paragraph"]


def test_a_real_latex_page_region_reads_its_paragraph_from_the_text_layer():
    document = ingest(corpus_bytes("pdflatex-4-pages.pdf"), Limits(dpi=72))
    source = next(document.pages())
    page, pdf_page = render_page(source), source.load()
    x0, y0, x1, y1, expected = pdf_page.get_text("blocks")[0][:5]
    [item] = prepare_regions(page, [DetectedRegion((x0, y0, x1, y1), "text", 1.0, 0)], DEFAULTS, pdf_page)
    assert item.text is not None
    assert item.text.split() == expected.split()


def test_words_join_into_lines_and_a_hyphen_at_a_line_end_joins_the_word():
    words = [(0, 0, 1, 1, "A", 0, 0, 0), (0, 0, 1, 1, "hyphen-", 0, 0, 1), (0, 0, 1, 1, "ated", 0, 1, 0),
             (0, 0, 1, 1, "word.", 0, 1, 1), (0, 0, 1, 1, "Next", 1, 0, 0), (0, 0, 1, 1, "Block", 1, 0, 1)]
    assert join_words(words) == "A hyphenated word.\nNext Block"


def test_a_picture_keeps_the_words_printed_on_it_without_going_to_the_model():
    def chart(page):
        page.draw_rect(pymupdf.Rect(20, 20, 200, 150), color=(0, 0, 0), fill=(0.2, 0.3, 0.8))
        page.insert_text((30, 170), "0 10 20 Zeit [s]", fontsize=8)

    page, pdf_page = _pdf_page(chart)
    regions = [DetectedRegion((10, 10, 210, 180), "image", 0.9, 0), DetectedRegion((10, 10, 210, 180), "chart", 0.9, 1)]
    image, chart_region = prepare_regions(page, regions, DEFAULTS, pdf_page)
    assert (image.task, image.text, image.needs_model) == (None, "0 10 20 Zeit [s]", False)
    assert chart_region.text == "0 10 20 Zeit [s]"  # a chart is a picture too while charts are not recognised


def test_a_photo_without_words_has_no_text():
    page, pdf_page = _pdf_page(lambda page: page.draw_rect(pymupdf.Rect(20, 20, 200, 150), fill=(0, 0, 0)))
    [item] = prepare_regions(page, [DetectedRegion((10, 10, 210, 180), "image", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.text is None


def test_upright_lines_of_a_page_shown_rotated_read_forwards():
    pdf = pymupdf.open()
    page = pdf.new_page(width=200, height=300)
    page.set_rotation(90)
    for y, words in ((40, "first line reads forwards"), (60, "and so does the second")):
        page.insert_text(pymupdf.Point(20, y) * page.derotation_matrix, words, fontsize=10, rotate=90)
    document = ingest(pdf.tobytes(), Limits(dpi=72))
    source = next(document.pages())
    rendered = render_page(source)
    [item] = prepare_regions(rendered, [DetectedRegion((0, 0, 300, 200), "text", 0.9, 0)], DEFAULTS, source.load())
    assert item.text == "first line reads forwards\nand so does the second"


def test_ligatures_read_as_their_letters_and_keep_the_space_after_a_word():
    """A word set with ﬀ, ﬁ, ﬂ or ﬃ (TeX's fonts, most book fonts) reads as plain letters, as search and a reader
    expect, and a ligature at a word's end keeps the space before the next word (the words placed apart, as TeX
    places them, without a space character between)."""
    def ligatures(page):
        page.insert_font(fontname="F0", fontbuffer=pymupdf.Font("tiro").buffer)  # embedded: ligatures encodable
        x = 20.0
        for word in "The staﬀ of the oﬃce ﬁnd a ﬂat ﬁx".split():
            page.insert_text((x, 40), word, fontsize=10, fontname="F0")
            x += pymupdf.Font("tiro").text_length(word, fontsize=10) + 2.5

    page, pdf_page = _pdf_page(ligatures)
    [item] = prepare_regions(page, [DetectedRegion((10, 20, 290, 50), "text", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.text == "The staff of the office find a flat fix"


CONTENTS = [("1", "Introduction", "3"), ("1.1", "Open sets", "4"), ("2", "Metric spaces", "7")]


def test_a_table_of_contents_reads_one_entry_a_line():
    """Number, title, dot leaders and page of an entry are set apart on one row (PyMuPDF makes each a line of its
    own): they read as one line, as printed."""
    def contents(page):
        for row, (number, title, page_number) in enumerate(CONTENTS):
            y = 40 + 14 * row
            page.insert_text((20, y), number, fontsize=10)
            page.insert_text((50, y), title, fontsize=10)
            page.insert_text((140, y), ". . . . . . . . . . . . . . .", fontsize=10)
            page.insert_text((270, y), page_number, fontsize=10)

    page, pdf_page = _pdf_page(contents)
    [item] = prepare_regions(page, [DetectedRegion((10, 20, 290, 80), "text", 0.9, 0)], DEFAULTS, pdf_page)
    assert item.text == "\n".join(f"{number} {title} . . . . . . . . . . . . . . . {page_number}"
                                  for number, title, page_number in CONTENTS)
