"""The pipeline end to end on a document: every page's regions in flight together, bad input as error codes.

The layout and the recognizer here are small implementations of their interfaces with known answers, so each test
can say exactly what comes out; the real engine runs in the last test and in tests/test_cli.py.
"""

from __future__ import annotations

import io
import threading
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from PIL import Image

from pipeline.documents.assemble import document_json, document_markdown, load_schema
from pipeline.documents.layout_contract import DetectedRegion
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.lazy_recognizer import LazyRecognizer, ModelUnavailable
from pipeline.documents.page_ranges import parse_page_ranges
from pipeline.documents.process import ProcessOptions, scan_directory
from pipeline.documents.recognizer import EngineRecognizer, Recognition, RecognitionTask
from pipeline.documents.regions import RegionOptions
from pipeline.documents.render import RenderedPage
from pipeline.documents.results import RegionContent, Usage
from pipeline.documents.source import Limits, SourcePage
from pipeline.documents.stream import process_document, process_file
from tests.documents.samples import ENCRYPTED, ENCRYPTED_PASSWORD, corpus_bytes, png_header, tiff_pages

ANSWERS = {"ocr": "words", "table": "<fcel>a<fcel>b<nl>", "formula": "$$x^2$$"}
NO_TEXT_LAYER = ProcessOptions(Limits(dpi=36), RegionOptions(text_layer="off"))


class Article:
    """A layout with one of each kind of region, placed by fractions of the page."""

    name = "article"
    BOXES = [("doc_title", (0.1, 0.05, 0.9, 0.1)), ("text", (0.1, 0.15, 0.9, 0.4)), ("table", (0.1, 0.45, 0.9, 0.6)),
             ("display_formula", (0.3, 0.65, 0.7, 0.7)), ("image", (0.1, 0.75, 0.5, 0.9)),
             ("number", (0.45, 0.95, 0.55, 0.98)), ("text", (1.5, 1.5, 2.0, 2.0))]  # the last lies off the page

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        w, h = page.width_px, page.height_px
        return [DetectedRegion((x0 * w, y0 * h, x1 * w, y1 * h), label, 0.8, order)
                for order, (label, (x0, y0, x1, y1)) in enumerate(self.BOXES)]


class Scripted:
    """Answers each task with a fixed text; holds every answer back until `expected` regions were submitted."""

    def __init__(self, expected: int = 0) -> None:
        self.expected, self.tasks = expected, []
        self.pending: list[Future[Recognition]] = []
        self.lock = threading.Lock()
        # A pipeline that waits for an answer before submitting everything gets failures after a while, not a hang.
        self.timer = threading.Timer(10.0, self.release, kwargs={"timed_out": True})
        self.timer.start()

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        future: Future[Recognition] = Future()
        with self.lock:
            self.tasks.append(task)
            self.pending.append(future)
        if len(self.tasks) >= self.expected:
            self.release()
        return future

    def release(self, timed_out: bool = False) -> None:
        with self.lock:
            pending, self.pending = self.pending, []
        for future, task in zip(pending, self.tasks[len(self.tasks) - len(pending):], strict=True):
            future.set_result(Recognition.failed("timeout", "held back") if timed_out else
                              Recognition(ANSWERS[task.task], "stop", Usage(prompt_tokens=10, generated_tokens=3)))
        self.timer.cancel()


def test_all_regions_of_all_pages_are_in_flight_together():
    recognizer = Scripted(expected=4 * 5)  # 4 pages × (title, text, table, formula, page number)
    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "paper.pdf", recognizer, Article(), NO_TEXT_LAYER)
    assert result.status == "succeeded" and len(result.pages) == 4
    assert [task.task for task in recognizer.tasks[:5]] == ["ocr", "ocr", "table", "formula", "ocr"]
    assert all(r.error is None for p in result.pages for r in p.regions[:6])


def test_each_region_gets_its_content_source_and_both_boxes():
    result = process_document(corpus_bytes("minimal-document.pdf"), "m.pdf", Scripted(), Article(), NO_TEXT_LAYER)
    title, text, table, formula, image, number, outside = result.pages[0].regions
    assert (title.content, title.source, title.usage) == (RegionContent("words", finish_reason="stop"), "model",
                                                          Usage(prompt_tokens=10, generated_tokens=3))
    assert table.content.html == "<table><tr><td>a</td><td>b</td></tr></table>"
    assert formula.content.latex == "x^2"
    assert (image.task, image.source, image.content) == (None, "none", RegionContent())
    assert number.content.text == "words"  # recognised and kept in the JSON; only the Markdown leaves it out
    assert outside.error.code == "empty_region"
    page = result.pages[0]
    assert title.bbox_pt == pytest.approx(tuple(v * 72 / page.dpi for v in title.bbox_px), abs=0.6)


def test_born_digital_text_comes_from_the_text_layer_without_the_model():
    recognizer = Scripted()
    options = ProcessOptions(Limits(dpi=72))
    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", recognizer, PageLayout(), options)
    assert {region.source for page in result.pages for region in page.regions} == {"text-layer"}
    assert recognizer.tasks == []
    assert result.pages[0].regions[0].content.text.startswith("Hello, here is some text without a meaning.")


@pytest.mark.parametrize(("data", "code"), [
    (bytes(range(256)) * 4, "unsupported_format"),
    (b"<!doctype html><html><body>not a pdf</body></html>", "unsupported_format"),
    (b"PK\x03\x04" + b"\0" * 100, "unsupported_format"),
    (corpus_bytes("minimal-document.pdf")[:400], "corrupt"),
    (corpus_bytes(ENCRYPTED), "encrypted"),
    (png_header(60000, 60000), "page_too_large"),
    (b"", "empty"),
])
def test_bad_documents_come_back_failed_with_their_code(data, code):
    result = process_document(data, "bad.pdf", Scripted(), PageLayout())
    assert (result.status, result.error.code, result.pages) == ("failed", code, [])
    jsonschema.validate(document_json(result), load_schema())


def test_an_encrypted_pdf_opens_with_its_password():
    options = ProcessOptions(Limits(dpi=36), password=ENCRYPTED_PASSWORD)
    assert process_document(corpus_bytes(ENCRYPTED), "e.pdf", Scripted(), PageLayout(), options).status == "succeeded"


def test_one_bad_page_fails_alone_and_the_document_is_partial():
    data = tiff_pages([(50, 40), (500, 400), (60, 40)])
    options = ProcessOptions(Limits(max_page_pixels=10_000))
    result = process_document(data, "scan.tiff", Scripted(), PageLayout(), options)
    assert [page.status for page in result.pages] == ["succeeded", "failed", "succeeded"]
    assert result.pages[1].error.code == "page_too_large" and result.status == "partial"


def test_a_document_whose_every_page_fails_is_failed():
    options = ProcessOptions(Limits(max_page_pixels=10_000))
    result = process_document(tiff_pages([(500, 400), (400, 500)]), "scan.tiff", Scripted(), PageLayout(), options)
    assert ([page.status for page in result.pages], result.status) == (["failed", "failed"], "failed")


def test_a_layout_failure_fails_its_page_only():
    class Flaky(Article):
        def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
            if page.index == 1:
                raise RuntimeError("model tripped")
            return super().detect(page, source)

    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", Scripted(), Flaky(), NO_TEXT_LAYER)
    assert [page.status for page in result.pages] == ["succeeded", "failed", "succeeded", "succeeded"]
    assert result.pages[1].error.code == "layout_failed" and result.status == "partial"


class Batched(Article):
    """Article that lays pages out in batches too, recording each batch's page indexes; the page `trips` makes its
    batch raise, and itself when alone."""

    def __init__(self, trips: int | None = None) -> None:
        self.trips, self.batches = trips, []

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        if page.index == self.trips:
            raise RuntimeError("model tripped")
        return super().detect(page, source)

    def detect_many(self, pages: list[tuple[RenderedPage, SourcePage]]) -> list[list[DetectedRegion]]:
        self.batches.append([page.index for page, _ in pages])
        return [self.detect(page, source) for page, source in pages]


def test_pages_are_laid_out_in_batches_with_the_regions_of_one_at_a_time():
    data = corpus_bytes("pdflatex-4-pages.pdf")
    layout = Batched()
    batched = process_document(data, "p.pdf", Scripted(), layout, replace(NO_TEXT_LAYER, layout_batch=3))
    one_by_one = process_document(data, "p.pdf", Scripted(), Article(), NO_TEXT_LAYER)
    assert layout.batches == [[0, 1, 2]]  # the fourth page, alone in its batch, through `detect`
    assert [page.regions for page in batched.pages] == [page.regions for page in one_by_one.pages]
    assert all(page.timings_ms["layout"] >= 0 for page in batched.pages)


def test_a_layout_batch_is_never_larger_than_the_pages_in_flight():
    layout = Batched()
    process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", Scripted(), layout,
                     replace(NO_TEXT_LAYER, pages_in_flight=2, layout_batch=8))
    assert layout.batches == [[0, 1], [2, 3]]


def test_a_batch_the_layout_trips_on_is_laid_out_again_page_by_page_and_only_the_odd_page_fails():
    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", Scripted(), Batched(trips=1),
                              replace(NO_TEXT_LAYER, layout_batch=4))
    assert [page.status for page in result.pages] == ["succeeded", "failed", "succeeded", "succeeded"]
    assert result.pages[1].error.code == "layout_failed" and result.status == "partial"


def test_every_page_reaches_the_callback_with_its_images():
    seen = []
    process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", Scripted(), PageLayout(),
                     ProcessOptions(Limits(dpi=36), pages_in_flight=1, page_images=True),
                     on_page=lambda done: seen.append((done.output.index, _png_size(done.images.page),
                                                       done.page_count)))
    assert seen == [(index, (298, 421), 4) for index in range(4)]  # A4 at 36 dpi


def test_pages_come_without_images_unless_a_writer_asks_for_them():
    seen = []
    process_document(corpus_bytes("minimal-document.pdf"), "m.pdf", Scripted(), PageLayout(), NO_TEXT_LAYER,
                     on_page=lambda done: seen.append(done.images))
    assert seen == [None]


def _png_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        return image.size


def test_an_unreadable_file_is_a_failed_document(tmp_path):
    result = process_file(tmp_path / "missing.pdf", Scripted(), PageLayout())
    assert (result.status, result.error.code) == ("failed", "unreadable")


def test_a_directory_stands_for_its_supported_files_by_content_and_the_others_are_set_apart(tmp_path):
    (tmp_path / "b.pdf").write_bytes(corpus_bytes("minimal-document.pdf"))
    (tmp_path / "a.scan").write_bytes(tiff_pages([(10, 10)]))  # supported whatever its name
    (tmp_path / "notes.txt").write_text("not a document")
    (tmp_path / "sub").mkdir()
    assert scan_directory(tmp_path) == ([tmp_path / "a.scan", tmp_path / "b.pdf"], [tmp_path / "notes.txt"])


def test_the_engine_recognizer_runs_a_real_tiny_model(tiny_checkpoint: Path):
    from pipeline.engine.engine import Engine

    engine = Engine.from_pretrained(tiny_checkpoint)
    try:
        result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", EngineRecognizer(engine, 4),
                                  PageLayout(), NO_TEXT_LAYER)
    finally:
        engine.close()
    regions = [page.regions[0] for page in result.pages]
    assert result.status == "succeeded"
    assert all(r.source == "model" and r.usage.prompt_tokens > 0 and 1 <= r.usage.generated_tokens <= 4
               for r in regions)
    assert all(r.content.finish_reason in {"stop", "length", "repetition"} and r.usage.ttft_ms > 0 for r in regions)
    jsonschema.validate(document_json(result), load_schema())


def test_regions_skipped_for_want_of_a_model_leave_the_page_succeeded_the_document_partial_and_the_markdown_clean():
    def refuse() -> None:
        raise ModelUnavailable("model_none", "no model was asked for")

    class OnThePage(Article):
        BOXES = Article.BOXES[:-1]

    result = process_document(corpus_bytes("minimal-document.pdf"), "m.pdf", LazyRecognizer(refuse), OnThePage(),
                              NO_TEXT_LAYER)
    title, text, table, formula, image, number = result.pages[0].regions
    assert [r.status for r in (title, table, formula, image)] == ["skipped", "skipped", "skipped", "succeeded"]
    assert (table.error.code, table.source, table.content.text) == ("model_none", "none", None)
    assert result.status == "partial" and result.pages[0].status == "succeeded"  # its content is not all there
    assert result.model_error == table.error  # why, said once for the document
    assert document_markdown(result) == "<!-- image -->\n"
    jsonschema.validate(document_json(result), load_schema())


def test_only_the_pages_asked_for_are_processed_keeping_their_numbers():
    options = replace(NO_TEXT_LAYER, pages=parse_page_ranges("2-3"))
    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", Scripted(), PageLayout(), options)
    assert [page.index for page in result.pages] == [1, 2] and result.status == "succeeded"


def test_pages_asked_for_past_the_last_page_fail_the_document_saying_how_many_it_has():
    options = replace(NO_TEXT_LAYER, pages=parse_page_ranges("9-"))
    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", Scripted(), PageLayout(), options)
    assert (result.status, result.error.code) == ("failed", "pages_out_of_range")
    assert "the document has 4" in result.error.message


def test_a_recursive_scan_finds_the_files_in_folders_below(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "a.pdf").write_bytes(corpus_bytes("minimal-document.pdf"))
    (tmp_path / "sub" / "deeper" / "b.tiff").write_bytes(tiff_pages([(10, 10)]))
    assert scan_directory(tmp_path) == ([tmp_path / "a.pdf"], [])
    assert scan_directory(tmp_path, recursive=True)[0] == [tmp_path / "a.pdf", tmp_path / "sub" / "deeper" / "b.tiff"]
