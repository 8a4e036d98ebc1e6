"""Many documents through one recognizer: no drain between them, each yielded when it completes, pages in order.

The page work runs in this thread (InlinePages) with the small layout and recognizers of test_process.py, so each
test can hold or release recognitions and watch what the stream does meanwhile.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import replace

from pipeline.documents.page_pool import InlinePages
from pipeline.documents.page_ranges import parse_page_ranges
from pipeline.documents.process import FinishedPage
from pipeline.documents.recognizer import Recognition, RecognitionTask
from pipeline.documents.results import Usage
from pipeline.documents.stream import DocumentInput, process_stream, region_tag
from tests.documents.samples import corpus_bytes
from tests.documents.test_process import NO_TEXT_LAYER, Article, Scripted

FOUR_PAGES = DocumentInput(corpus_bytes("pdflatex-4-pages.pdf"), "four.pdf")
ONE_PAGE = DocumentInput(corpus_bytes("minimal-document.pdf"), "one.pdf")
REGIONS_PER_PAGE = 5  # Article's regions that go to the model


class Held:
    """Answers a region at once unless its tag starts with `held`; those wait for release(), last page first."""

    def __init__(self, held: str = "") -> None:
        self.held, self.waiting = held, []
        self.lock = threading.Lock()

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        future: Future[Recognition] = Future()
        if self.held and task.tag.startswith(self.held):
            with self.lock:
                self.waiting.append(future)
        else:
            future.set_result(Recognition("words", "stop", Usage(generated_tokens=1)))
        return future

    def release(self) -> None:
        with self.lock:
            waiting, self.waiting = self.waiting, []
        for future in reversed(waiting):
            future.set_result(Recognition("words", "stop", Usage(generated_tokens=1)))


def _stream(inputs, recognizer, options=NO_TEXT_LAYER, on_page=None):
    pages = InlinePages(Article(), options)
    return process_stream(inputs, recognizer, pages, options, on_page)


def test_the_next_document_s_regions_are_in_flight_before_the_last_ones_of_the_one_before_come_back():
    recognizer = Scripted(expected=5 * REGIONS_PER_PAGE)  # answers nothing until both documents' regions are in
    results = dict(_stream([FOUR_PAGES, ONE_PAGE], recognizer))
    assert [results[0].status, results[1].status] == ["succeeded", "succeeded"]
    assert all(region.source == "model" for document in results.values() for page in document.pages
               for region in page.regions if region.task is not None and region.error is None)


def test_documents_come_out_as_they_complete_each_with_its_input_position():
    recognizer = Held(held="four.pdf")
    stream = _stream([FOUR_PAGES, ONE_PAGE], recognizer)
    position, first = next(stream)
    assert (position, first.name, first.status) == (1, "one.pdf", "succeeded")
    recognizer.release()
    position, second = next(stream)
    assert (position, second.name, len(second.pages)) == (0, "four.pdf", 4)


def test_a_page_is_handed_on_when_it_finishes_and_the_document_lists_its_pages_in_order():
    recognizer = Held(held="four.pdf#p1")  # the first page's regions wait; the others come back at once
    seen: list[int] = []
    stream = _stream([FOUR_PAGES], recognizer, on_page=lambda position, finished: seen.append(finished.output.index))
    releaser = threading.Timer(0.5, recognizer.release)
    releaser.start()
    [(_, document)] = list(stream)
    assert seen == [1, 2, 3, 0]  # the held first page does not hold back the pages after it
    assert [page.index for page in document.pages] == [0, 1, 2, 3]


class Later:
    """Answers each region a little later, from another thread, as an engine does."""

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        future: Future[Recognition] = Future()
        threading.Timer(0.02, future.set_result, [Recognition("words", "stop", Usage(generated_tokens=1))]).start()
        return future


def test_pages_in_flight_are_bounded_over_all_documents():
    recognizer = Later()
    live, peak = [0], [0]
    layout = Article()
    detect = layout.detect

    def counting(page, source):
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        return detect(page, source)

    layout.detect = counting
    options = replace(NO_TEXT_LAYER, pages_in_flight=2)
    pages = InlinePages(layout, options)

    def handed_on(position: int, finished: FinishedPage) -> None:
        live[0] -= 1

    results = dict(process_stream([FOUR_PAGES, ONE_PAGE, FOUR_PAGES], recognizer, pages, options, handed_on))
    assert len(results) == 3 and peak[0] == 2


def test_each_region_request_is_named_after_its_document_page_and_order():
    recognizer = Scripted()
    list(_stream([ONE_PAGE], recognizer))
    assert [task.tag for task in recognizer.tasks][:2] == [region_tag("one.pdf", 0, 0), region_tag("one.pdf", 0, 1)]
    assert region_tag("one.pdf", 0, 1) == "one.pdf#p1r1"


def test_a_failed_document_and_pages_out_of_range_complete_without_holding_the_others():
    options = replace(NO_TEXT_LAYER, pages=parse_page_ranges("3-"))
    results = dict(process_stream([DocumentInput(b"not a document", "bad.bin"), ONE_PAGE, FOUR_PAGES],
                                  Scripted(), InlinePages(Article(), options), options))
    assert results[0].error.code == "unsupported_format"
    assert results[1].error.code == "pages_out_of_range"
    assert [page.index for page in results[2].pages] == [2, 3]
