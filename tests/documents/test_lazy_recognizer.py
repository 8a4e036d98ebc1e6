"""The model is loaded when the first region needs it, once; without one, regions come back skipped, not failed."""

from __future__ import annotations

from concurrent.futures import Future

from PIL import Image

from pipeline.documents.layout_page import PageLayout
from pipeline.documents.lazy_recognizer import LazyRecognizer, ModelUnavailable
from pipeline.documents.process import ProcessOptions
from pipeline.documents.recognizer import Recognition, RecognitionTask
from pipeline.documents.results import Problem
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.samples import corpus_bytes

TASK = RecognitionTask(Image.new("RGB", (8, 8)), "ocr")


class Answering:
    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        future: Future[Recognition] = Future()
        future.set_result(Recognition("words", "stop"))
        return future

    def cancel(self, future: Future[Recognition]) -> None:
        pass


def counting_loader(loads: list[int], unavailable: ModelUnavailable | None = None):
    def load() -> Answering:
        loads.append(1)
        if unavailable is not None:
            raise unavailable
        return Answering()

    return load


def test_a_document_the_text_layer_serves_whole_never_loads_the_model():
    loads: list[int] = []
    recognizer = LazyRecognizer(counting_loader(loads))
    result = process_document(corpus_bytes("pdflatex-4-pages.pdf"), "p.pdf", recognizer, PageLayout(),
                              ProcessOptions(Limits(dpi=72)))
    assert result.status == "succeeded" and loads == [] and not recognizer.loaded


def test_the_model_loads_once_on_the_first_region_that_needs_it():
    loads: list[int] = []
    recognizer = LazyRecognizer(counting_loader(loads))
    answers = [recognizer.submit(TASK).result().text for _ in range(3)]
    assert answers == ["words"] * 3 and loads == [1] and recognizer.loaded


def test_without_a_model_every_region_is_skipped_with_the_reason_and_loading_is_tried_once():
    loads: list[int] = []
    recognizer = LazyRecognizer(counting_loader(loads, ModelUnavailable("model_unavailable", "not here")))
    results = [recognizer.submit(TASK).result() for _ in range(2)]
    assert [(r.skipped, r.error) for r in results] == [(True, Problem("model_unavailable", "not here"))] * 2
    assert loads == [1] and recognizer.unavailable.code == "model_unavailable"
