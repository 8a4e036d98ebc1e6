"""Drawn panels, frames and figures behind text: prose on them is the page's text, not the labels of a picture."""

from __future__ import annotations

import pymupdf
import pytest

from pipeline.documents.assemble import page_markdown
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.process import ProcessOptions
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers
from tests.documents.born_digital import prose_on_a_drawing, text_on_a_panel, vector_plot

DPI = 100


@pytest.mark.parametrize("rounded", [False, True])
def test_a_page_whose_only_text_sits_on_a_drawn_panel_is_text(rounded: bool):
    result = process_document(text_on_a_panel(rounded=rounded), "panel.pdf", Answers(), PdfLayout(),
                              ProcessOptions(Limits(dpi=DPI)))
    page = result.pages[0]
    assert [region.label for region in page.regions] == ["doc_title", "text"]
    markdown = page_markdown(page)
    assert markdown.startswith("# A Poster Title\n\nBody text of the page")
    assert "image" not in markdown


def test_a_chart_drawn_on_the_panel_stays_a_chart_beside_the_text():
    result = process_document(text_on_a_panel(chart=True), "panel.pdf", Answers(), PdfLayout(),
                              ProcessOptions(Limits(dpi=DPI)))
    page = result.pages[0]
    assert [region.label for region in page.regions] == ["doc_title", "text", "chart"]
    assert page.regions[2].content.text.split() == ["100", "50", "0"]  # its tick labels, and no more


def test_prose_on_a_line_drawing_is_text_and_only_the_drawing_s_labels_are_its_words():
    result = process_document(prose_on_a_drawing(), "map.pdf", Answers(), PdfLayout(), ProcessOptions(Limits(dpi=DPI)))
    regions = {region.label: region for region in result.pages[0].regions}
    assert sorted(regions) == ["doc_title", "image", "text"]
    assert regions["text"].content.text.startswith("Body text of the page")
    assert regions["image"].content.text == "Nordufer"


def test_one_long_legend_entry_on_a_chart_stays_one_of_its_labels():
    pdf = pymupdf.open(stream=vector_plot())
    legend = pdf[0].search_for("Messung B")[0]
    pdf[0].insert_text((legend.x0 - 60, legend.y1 + 12), "Messung C (gleitender Mittelwert)", fontsize=8)
    result = process_document(pdf.tobytes(), "plot.pdf", Answers(), PdfLayout(), ProcessOptions(Limits(dpi=DPI)))
    regions = result.pages[0].regions
    assert [region.label for region in regions] == ["text", "chart", "figure_title", "text"]
    assert "Messung C (gleitender Mittelwert)" in regions[1].content.text
