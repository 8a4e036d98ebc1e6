"""Drawn data: a ruled area whose cells hold curves is a plot, however many words sit in it, never a table."""

from __future__ import annotations

import pytest

from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.render import render_page
from pipeline.documents.source import Limits, ingest
from tests.documents.born_digital import plot_with_words_inside


@pytest.mark.parametrize("legend_in_a_row", [False, True])
def test_a_plot_on_a_ruled_grid_with_words_inside_is_a_chart_not_a_table(legend_in_a_row: bool):
    with ingest(plot_with_words_inside(legend_in_a_row), Limits(dpi=100)) as document:
        source = next(document.pages())
        regions = PdfLayout().detect(render_page(source), source)
    assert [region.label for region in regions] == ["text", "chart", "figure_title", "text"]
