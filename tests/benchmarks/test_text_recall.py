"""No line of a born-digital PDF's text layer is dropped by the `pdf` layout: every one is in its page's Markdown,
inside a region sent to the model, or on a running header, footer or page number. Held for every corpus PDF (and
any more in ../shared/corpus) and for the generated documents of the layout tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import text_recall
from pipeline.documents.layout_contract import DetectedRegion
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage
from tests.documents import born_digital
from tests.documents.samples import CORPUS, ENCRYPTED_PASSWORD

SHARED_CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
PDFS = {path.name: path for path in sorted(SHARED_CORPUS.glob("*.pdf"))} | {
    path.name: path for path in sorted(CORPUS.glob("*.pdf"))}
GENERATED: dict[str, Callable[[], bytes]] = {
    "synthetic-page": born_digital.synthetic_page, "headings-in-the-top-band": born_digital.headings_in_the_top_band,
    "vector-plot": born_digital.vector_plot, "display-formulas": born_digital.display_formulas}


@pytest.mark.parametrize("name", sorted(PDFS))
def test_no_text_layer_line_of_a_corpus_pdf_is_dropped(name: str):
    counts = text_recall.text_recall(PDFS[name].read_bytes(), name, password=ENCRYPTED_PASSWORD)
    assert counts["dropped"] == 0, counts["dropped_lines"]
    assert counts["lines"] == counts["markdown"] + counts["model"] + counts["furniture"]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_no_text_layer_line_of_a_generated_pdf_is_dropped(name: str):
    counts = text_recall.text_recall(GENERATED[name](), name)
    assert counts["lines"] > 0 and counts["dropped"] == 0, counts["dropped_lines"]


class FirstRegionOnly:
    """A layout that loses everything but the first region of each page."""

    name = "lossy"

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        return PdfLayout().detect(page, source)[:1]


def test_a_layout_that_loses_regions_is_caught(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(text_recall, "layout_backend", lambda name: FirstRegionOnly())
    counts = text_recall.text_recall((CORPUS / "multicolumn.pdf").read_bytes(), "multicolumn.pdf")
    assert counts["dropped"] > 100
    assert counts["dropped_lines"][0] == "page 1: Your   Name"
    assert len(counts["dropped_lines"]) == text_recall.SHOWN_DROPPED


def test_the_tool_prints_a_json_line_per_file_and_exits_0_when_nothing_is_dropped(capsys: pytest.CaptureFixture):
    files = [CORPUS / "minimal-document.pdf", CORPUS / "pdflatex-4-pages.pdf"]
    assert text_recall.main([str(path) for path in files]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["file"], line["pages"], line["dropped"]) for line in lines] == [
        ("minimal-document.pdf", 1, 0), ("pdflatex-4-pages.pdf", 4, 0)]
    assert lines[1]["furniture"] == 4  # the page numbers


def test_an_encrypted_pdf_without_its_password_reports_the_error():
    counts = text_recall.text_recall((CORPUS / "libreoffice-writer-password.pdf").read_bytes(), "locked.pdf")
    assert (counts["error"], counts["lines"]) == ("encrypted", 0)
