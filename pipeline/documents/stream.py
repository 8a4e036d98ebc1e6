"""Documents through the whole pipeline: ingest → render → layout → regions → recognize → results, many through one
recognizer with no drain between them (`process_stream`), or one in the calling thread (`process_document`).

The page tasks of every document go to the page workers (page_pool.py) in input order, document after document,
as long as fewer than `pages_in_flight` pages are between their task and their finish, so the pages of the next
document are rendered while the last regions of the one before are still recognised, and a directory of one-page
PDFs keeps the engine as full as one long PDF. A page is handed on (`on_page`) as soon as its last region is back,
whatever its place in its document: a long region holds its own page, not the pages after it, so it neither stalls
the window nor keeps their images in memory. This thread only hands work in and results out: each laid-out page's
crops to the recognizer (already cut to the model's grid by the workers), each recognised page to `on_page` and into
its document, and, where the layout is a model, the rendered pages to it in batches that take what the workers have
rendered (`layout_batch` at most). A document is yielded when its last page is in, its pages in page order, so
documents come in completion order; its position in the input says which it is.

Every event (a task's result from the workers, a region's recognition from the engine's thread) comes through one
queue, so the state below is this thread's alone.
"""

from __future__ import annotations

import itertools
import queue
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pipeline.documents.layout import LayoutBackend
from pipeline.documents.page_images import PageImages
from pipeline.documents.page_pool import InlinePages
from pipeline.documents.page_work import (
    Opened,
    OpenTask,
    PageTask,
    PageWork,
    PageWorkTask,
    RegionsTask,
    Rendered,
    Result,
)
from pipeline.documents.process import (
    FinishedPage,
    PageCallback,
    PageDraft,
    ProcessOptions,
    detect_all,
    document_status,
    out_of_range,
)
from pipeline.documents.recognizer import Recognition, RecognitionTask, Recognizer
from pipeline.documents.results import DocumentOutput, PageOutput


class Pages(Protocol):
    """Where page tasks run (page_pool.py's InlinePages or PagePool)."""

    capacity: int
    lays_out: bool
    layout: LayoutBackend

    def connect(self, deliver: Callable[[Result], None]) -> None: ...

    def send(self, task: PageWorkTask) -> None: ...


@dataclass(frozen=True)
class DocumentInput:
    source: Path | bytes
    name: str


DocumentCallback = Callable[[int, FinishedPage], None]
_KEYS = itertools.count()


@dataclass(frozen=True)
class _Recognized:
    key: tuple[int, int]  # (document key, page index)
    region: int
    recognition: Recognition


@dataclass
class _Document:
    position: int  # in the input
    key: int  # in the tasks: unique in the process, so a result for a stream left early is told apart
    input: DocumentInput
    started: float
    opened: Opened | None = None
    pages: list[int] = field(default_factory=list)  # the page indices to do, in order
    sent: int = 0  # of `pages`, how many went to the workers
    done: dict[int, PageOutput] = field(default_factory=dict)  # finished pages, by index


@dataclass
class _Page:
    draft: PageDraft
    images: PageImages | None
    waiting: int
    recognitions: dict[int, Recognition] = field(default_factory=dict)


def process_file(path: Path, recognizer: Recognizer, layout: LayoutBackend, options: ProcessOptions | None = None,
                 on_page: PageCallback | None = None, model: str | None = None) -> DocumentOutput:
    """One document from a file, in this thread; a file that cannot be read is a failed document (`unreadable`)."""
    return _one(path, path.name, recognizer, layout, options, on_page, model)


def process_document(data: bytes, name: str, recognizer: Recognizer, layout: LayoutBackend,
                     options: ProcessOptions | None = None, on_page: PageCallback | None = None,
                     model: str | None = None) -> DocumentOutput:
    """Every page of one document, recognised; `on_page` sees each page as it finishes."""
    return _one(data, name, recognizer, layout, options, on_page, model)


def _one(source: Path | bytes, name: str, recognizer: Recognizer, layout: LayoutBackend,
         options: ProcessOptions | None, on_page: PageCallback | None, model: str | None) -> DocumentOutput:
    options = options or ProcessOptions()
    with InlinePages(layout, options) as pages:
        callback = None if on_page is None else (lambda _, finished: on_page(finished))
        for _, document in process_stream([DocumentInput(source, name)], recognizer, pages, options, callback, model):
            return document
    raise AssertionError("process_stream yields every document it is given")


def process_stream(inputs: Iterable[DocumentInput], recognizer: Recognizer, pages: Pages,
                   options: ProcessOptions, on_page: DocumentCallback | None = None,
                   model: str | None = None) -> Iterator[tuple[int, DocumentOutput]]:
    """(input position, result) of each document as it completes; `on_page` sees each page as it finishes."""
    yield from _Stream(inputs, recognizer, pages, options, on_page, model).run()


class _Stream:
    def __init__(self, inputs: Iterable[DocumentInput], recognizer: Recognizer, pages: Pages,
                 options: ProcessOptions, on_page: DocumentCallback | None, model: str | None) -> None:
        self.inputs = enumerate(inputs)
        self.recognizer, self.pages, self.options = recognizer, pages, options
        self.on_page, self.model = on_page, model
        self.events: queue.SimpleQueue[Result | _Recognized] = queue.SimpleQueue()
        self.documents: OrderedDict[int, _Document] = OrderedDict()
        self.recognizing: dict[tuple[int, int], _Page] = {}
        self.rendered: list[Rendered] = []  # waiting for the layout model
        self.completed: list[tuple[int, DocumentOutput]] = []
        self.outstanding = 0  # tasks sent and not answered
        self.in_flight = 0  # pages sent and not yet finished
        self.more_inputs = True
        self.limit = max(1, options.pages_in_flight)
        self.batch = max(1, min(options.layout_batch, self.limit))
        self.open_ahead = max(2, pages.capacity // 2)

    def run(self) -> Iterator[tuple[int, DocumentOutput]]:
        self.pages.connect(self.events.put)
        while True:
            self._feed()
            if not (self.more_inputs or self.documents):
                return
            self._handle(self.events.get())
            while not self.events.empty():
                self._handle(self.events.get())
            self._lay_out()
            completed, self.completed = self.completed, []
            yield from completed

    # -- sending work ------------------------------------------------------------------------------------------

    def _feed(self) -> None:
        while self.outstanding < self.pages.capacity and (task := self._next_task()) is not None:
            self._send(task)

    def _send(self, task: PageWorkTask) -> None:
        self.outstanding += 1
        self.pages.send(task)

    def _next_task(self) -> PageWorkTask | None:
        """The next page of the first document with pages to send, within the pages-in-flight bound; else the
        next document to open, while few enough opened documents still have pages to send."""
        unsent = [document for document in self.documents.values() if _has_unsent(document)]
        ready = next((document for document in unsent if document.opened is not None), None)
        if ready is not None and self.in_flight < self.limit:
            return self._page_task(ready)
        if len(unsent) < self.open_ahead:
            return self._open_task()
        return None

    def _page_task(self, document: _Document) -> PageTask:
        opened = document.opened
        index = document.pages[document.sent]
        document.sent += 1
        self.in_flight += 1
        return PageTask(document.key, document.input.source, index, opened.sha256, opened.furniture)

    def _open_task(self) -> OpenTask | None:
        if not self.more_inputs:
            return None
        try:
            position, item = next(self.inputs)
        except StopIteration:
            self.more_inputs = False
            return None
        key = next(_KEYS)
        self.documents[key] = _Document(position, key, item, time.perf_counter())
        return OpenTask(key, item.source)

    # -- results -----------------------------------------------------------------------------------------------

    def _handle(self, event: Result | _Recognized) -> None:
        if isinstance(event, _Recognized):
            self._recognized(event)
            return
        if event.doc not in self.documents:  # sent by a stream its caller left before the end: not this one's
            return
        self.outstanding -= 1
        if isinstance(event, Opened):
            self._opened(event)
        elif isinstance(event, Rendered):
            self.rendered.append(event)
        else:
            self._recognize(event)

    def _opened(self, opened: Opened) -> None:
        document = self.documents[opened.doc]
        document.opened = opened
        wanted = self.options.pages
        if opened.error is None and wanted is not None and wanted.first() > opened.page_count:
            opened = Opened(opened.doc, opened.sha256, opened.media_type, opened.size,
                            error=out_of_range(wanted, opened.page_count))
            document.opened = opened
        if opened.error is not None:
            self._complete(document)
            return
        document.pages = [index for index in range(opened.page_count) if wanted is None or index in wanted]
        if not document.pages:
            self._complete(document)

    def _recognize(self, work: PageWork) -> None:
        """Send a laid-out page's crops to the recognizer (those refused already are failed recognitions)."""
        key = (work.doc, work.draft.output.index)
        page = _Page(work.draft, work.images, len(work.crops))
        self.recognizing[key] = page
        name = self.documents[work.doc].input.name
        for crop in work.crops:
            if crop.error is not None:
                self.events.put(_Recognized(key, crop.region, Recognition.failed(crop.error.code, crop.error.message)))
                continue
            order = work.draft.output.regions[crop.region].order
            task = RecognitionTask(crop.pixels, crop.task, tag=region_tag(name, key[1], order))
            future = self.recognizer.submit(task)
            future.add_done_callback(
                lambda done, region=crop.region: self.events.put(_Recognized(key, region, _outcome(done))))
        if not work.crops:
            self._page_done(key)

    def _recognized(self, event: _Recognized) -> None:
        page = self.recognizing[event.key]
        page.recognitions[event.region] = event.recognition
        page.waiting -= 1
        if page.waiting == 0:
            self._page_done(event.key)

    def _page_done(self, key: tuple[int, int]) -> None:
        """A page is finished: handed on at once (its images are written and let go), kept in its document."""
        page = self.recognizing.pop(key)
        document = self.documents[key[0]]
        output = page.draft.finished(page.recognitions)
        document.done[key[1]] = output
        self.in_flight -= 1
        if self.on_page is not None:
            self.on_page(document.position, FinishedPage(output, page.images, document.opened.page_count))
        if len(document.done) == len(document.pages):
            self._complete(document)

    def _complete(self, document: _Document) -> None:
        del self.documents[document.key]
        opened, name = document.opened, document.input.name
        if opened.error is not None:
            output = DocumentOutput(name, "failed", opened.sha256, opened.media_type, opened.size,
                                    error=opened.error, model=self.model)
        else:
            pages = [document.done[index] for index in document.pages]
            timings = {"ingest": opened.ingest_ms, "total": (time.perf_counter() - document.started) * 1000.0}
            output = DocumentOutput(name, document_status(pages), opened.sha256, opened.media_type, opened.size, pages,
                                    model=self.model, timings_ms=timings)
        self.completed.append((document.position, output))

    # -- the layout model, beside the engine ---------------------------------------------------------------------

    def _lay_out(self) -> None:
        """Lay the rendered pages out once a batch is full, or once no more can come before some are laid out."""
        while self.rendered and (len(self.rendered) >= self.batch or self._stalled()):
            batch, self.rendered = self.rendered[:self.batch], self.rendered[self.batch:]
            started = time.perf_counter()
            found = detect_all(self.pages.layout, [(each.page, None) for each in batch])
            layout_ms = (time.perf_counter() - started) * 1000.0 / len(batch)
            for each, regions in zip(batch, found, strict=True):
                source = self.documents[each.doc].input.source
                self._send(RegionsTask(each.doc, source, each.page, regions,
                                       {"render": each.render_ms, "layout": layout_ms}))

    def _stalled(self) -> bool:
        """No task is out and no page can be sent: the pages waiting for the layout are all there will be."""
        if self.outstanding:
            return False
        sendable = any(_has_unsent(document) and document.opened is not None for document in self.documents.values())
        return not sendable or self.in_flight >= self.limit


def region_tag(name: str, page_index: int, order: int) -> str:
    """What names a region's engine request: its document's name, page number and reading order."""
    return f"{name}#p{page_index + 1}r{order}"


def _outcome(done: Future[Recognition]) -> Recognition:
    """A recognizer's futures do not fail; one that does anyway fails its region, not the stream."""
    exc = done.exception()
    return done.result() if exc is None else Recognition.failed("recognition_failed", f"{type(exc).__name__}: {exc}")


def _has_unsent(document: _Document) -> bool:
    return document.opened is None or document.sent < len(document.pages)
