"""Page furniture is what repeats: running heads, feet and page numbers, decided over the whole document; anything
else in the top or bottom band keeps its own label (a heading stays a heading) and its place in the Markdown."""

from __future__ import annotations

import threading

import pymupdf
import pytest

from pipeline.documents import layout_furniture
from pipeline.documents.assemble import page_markdown
from pipeline.documents.layout_furniture import clear_cache, document_furniture, find_furniture
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.process import LaidOutPage, ProcessOptions, lay_out
from pipeline.documents.regions import RegionOptions
from pipeline.documents.render import render_page
from pipeline.documents.source import Limits, SourcePage, ingest
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers
from tests.documents.born_digital import HEADINGS, RUNNING_HEADS, headings_in_the_top_band

DPI = 100


def labelled_words(data: bytes) -> list[dict[str, str]]:
    """For each page, the PDF's words under each region → the region's label."""
    pages = []
    with ingest(data, Limits(dpi=DPI)) as document:
        for source in document.pages():
            page, pdf_page = render_page(source), source.load()
            pages.append({" ".join(pdf_page.get_textbox(pymupdf.Rect(page.to_points(region.bbox))).split()):
                          region.label for region in PdfLayout().detect(page, source)})
    return pages


def test_a_heading_in_the_top_band_stays_a_heading_on_every_page_type():
    pages = labelled_words(headings_in_the_top_band())
    assert [page.get(heading) for page, heading in zip(pages, HEADINGS, strict=True)] == ["paragraph_title"] * 5


def test_headings_in_the_top_band_reach_the_markdown_and_running_heads_do_not():
    result = process_document(headings_in_the_top_band(), "skript.pdf", Answers(), PdfLayout(),
                              ProcessOptions(Limits(dpi=DPI)))
    markdowns = [page_markdown(page) for page in result.pages]
    assert [markdown.splitlines()[0] for markdown in markdowns] == [f"## {heading}" for heading in HEADINGS]
    assert not any(head in markdown for markdown in markdowns for head in RUNNING_HEADS.values())


def test_running_heads_are_headers_and_page_numbers_numbers_on_every_page_type():
    pages = labelled_words(headings_in_the_top_band())
    heads = [next((words for words, label in page.items() if label == "header"), None) for page in pages]
    numbers = [[words for words, label in page.items() if label == "number"] for page in pages]
    assert heads == ["Topologie - Vorlesungsskript", "Kapitel 2. Metrische Räume", None,
                     "Kapitel 2. Metrische Räume", "Topologie - Vorlesungsskript"]
    assert numbers == [["1"], ["2"], ["3"], ["4"], ["5"]]


def test_a_page_laid_out_alone_from_a_fresh_copy_knows_the_whole_documents_furniture():
    """The service's prepare stage opens the upload afresh for each page and lays out that page alone."""
    data = headings_in_the_top_band()
    with ingest(data, Limits(dpi=DPI)) as document:
        together = [lay_out(source, PdfLayout(), RegionOptions()) for source in document.pages()]
    for index, whole in enumerate(together):
        clear_cache()
        with ingest(data, Limits(dpi=DPI)) as opened:
            alone = lay_out(SourcePage(opened, index), PdfLayout(), RegionOptions())
        assert isinstance(alone, LaidOutPage) and isinstance(whole, LaidOutPage)
        assert [item.region for item in alone.prepared] == [item.region for item in whole.prepared]
        assert "header" in {item.region.label for item in alone.prepared} or index == 2


def pdf_with(pages: list[list[tuple[float, str]]]) -> bytes:
    """One A4 page per entry, each a list of (baseline y, text) lines; a body paragraph fills each page's middle."""
    pdf = pymupdf.open()
    for lines in pages:
        page = pdf.new_page(width=595, height=842)
        for y, text in lines:
            page.insert_text((72, y), text, fontsize=9)
        page.insert_textbox(pymupdf.Rect(72, 200, 523, 600), "Body text of the page. " * 60, fontsize=10)
    return pdf.tobytes()


def running(data: bytes) -> list[set[str]]:
    """The texts of each page's furniture lines."""
    with ingest(data) as document:
        furniture = find_furniture(document)
        return [{key for _, key in furniture.pages.get(index, ())} for index in range(document.page_count)]


def test_a_line_whose_number_counts_the_pages_runs_across_them():
    found = running(pdf_with([[(40, f"Chapter 2 · {page}"), (800, "Quire Press")] for page in (17, 18, 19)]))
    assert found == [{f"Chapter2·{page}", "QuirePress"} for page in (17, 18, 19)]


def test_the_same_line_on_two_pages_runs_but_not_at_another_height():
    assert running(pdf_with([[(40, "Quire Journal")], [(40, "Quire Journal")]])) == [{"QuireJournal"}] * 2
    assert running(pdf_with([[(40, "Quire Journal")], [(60, "Quire Journal")]])) == [set(), set()]


def test_a_line_recurring_among_body_lines_nearer_the_edge_is_no_furniture():
    """A reference manual repeats "der: buffer to hold the encoding" near the foot of two pages; under it on each
    page is more of the body, which furniture never has."""
    found = running(pdf_with([[(730, "der: buffer to hold the encoding"), (770, "len: number of bits")],
                              [(730, "der: buffer to hold the encoding"), (770, "len: size of the buffer")]]))
    assert found == [set(), set()]


@pytest.mark.parametrize("numbers", [(12, 13), (10, 12, 14), (5, 9, 2)], ids=["two-pages", "by-twos", "jumps"])
def test_headings_whose_numbers_do_not_count_pages_are_no_furniture(numbers: tuple[int, ...]):
    """Two headings that count along with two pages are a coincidence; a running line outgrows it."""
    found = running(pdf_with([[(40, f"Example {number}")] for number in numbers]))
    assert found == [set()] * len(numbers)


def test_a_band_line_of_a_block_that_reaches_into_the_body_is_no_candidate():
    pdf = pymupdf.open()
    for _ in range(3):
        page = pdf.new_page(width=595, height=842)
        page.insert_textbox(pymupdf.Rect(72, 100, 523, 700), "The same first line on every page. " * 80,
                            fontsize=10)
    assert running(pdf.tobytes()) == [set(), set(), set()]


def test_furniture_is_found_once_per_document_content_however_many_threads_ask(monkeypatch: pytest.MonkeyPatch):
    data = pdf_with([[(40, "A document seen by this test alone 7f3a")]] * 2)
    calls: list[int] = []
    real = layout_furniture.find_furniture

    def counted(document):
        calls.append(1)
        return real(document)

    monkeypatch.setattr(layout_furniture, "find_furniture", counted)
    clear_cache()
    found = []

    def ask() -> None:
        with ingest(data) as document:  # each its own copy, as each page task has
            found.append(document_furniture(document))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(found) == 4 and all(each == found[0] for each in found)
