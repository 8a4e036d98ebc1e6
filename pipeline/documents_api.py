"""Documents in one call: `process("report.pdf")` → the result object, as `quire process` makes it.

`quire process` and this API build the same things around the document stream (documents/stream.py): the layout
backend the settings name, the region and ingest options (pipeline/document_settings.py, as the service's stages
do), the page workers, and the recognition model, loaded from the settings only when a region needs it (or the
engine the caller already has). Settings come from QUIRE_* variables; any Settings field can be given as a keyword
instead (`layout="pdf"`, `model="none"`, `dpi=150`, `max_pages=50`).

`DocumentProcessor.process_many` is the bulk path: many files through one engine, pages rendered and cropped by
worker processes (started with `spawn`, so a script that calls it needs an `if __name__ == "__main__":` guard, as
any multiprocessing program does); the one-document `process()` runs in the caller's thread unless
QUIRE_PROCESS_WORKERS asks for workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings, get_settings
from pipeline.document_settings import process_options
from pipeline.documents.layout import layout_backend
from pipeline.documents.lazy_recognizer import NO_MODEL, LazyRecognizer, ModelUnavailable
from pipeline.documents.page_pool import InlinePages, PagePool, default_workers
from pipeline.documents.page_ranges import PageRanges, parse_page_ranges
from pipeline.documents.process import PageCallback
from pipeline.documents.recognizer import EngineRecognizer, Recognizer
from pipeline.documents.results import DocumentOutput
from pipeline.documents.stream import (
    DocumentCallback,
    DocumentInput,
    Pages,
    process_document,
    process_file,
    process_stream,
)
from pipeline.engine.devices import resolve_device
from pipeline.engine.images import ImageSettings
from pipeline.engine.model.errors import CheckpointError
from pipeline.engine.model.loader import local_checkpoint
from pipeline.engine_settings import layout_device, pages_in_flight, task_max_tokens
from pipeline.model_loading import load_engine, model_revision

if TYPE_CHECKING:
    from pipeline.engine.engine import Engine


def process(source: str | Path | bytes, *, name: str | None = None, engine: Engine | None = None,
            password: str | None = None, pages: str | None = None, **settings: Any) -> DocumentOutput:
    """One document (a path, or its bytes) through the whole pipeline; `pages` as `1-5,9`; keywords override
    Settings fields. Bad input comes back as a failed result with its error code, never as an exception."""
    chosen = _settings(settings)
    with DocumentProcessor(chosen, engine, password, pages, workers=chosen.process_workers or 0) as processor:
        return processor.process(source, name)


def _settings(overrides: dict[str, Any]) -> Settings:
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise TypeError(f"not a setting: {', '.join(unknown)} (see pipeline/config.py)")
    return get_settings().model_copy(update=overrides)


class DocumentProcessor:
    """The layout backend, the page workers and the recognition model for many documents; close it to stop the
    workers and free the engine it loaded.

    Raises LayoutModelUnavailable at once when the settings ask for `pp-doclayout` without its weights; a missing
    recognition model only shows when a region needs it, as skipped regions (`unavailable` says why).
    """

    def __init__(self, settings: Settings, engine: Engine | None = None, password: str | None = None,
                 pages: str | PageRanges | None = None, max_tokens: int | None = None, workers: int | None = None,
                 page_images: bool = False, recognizer: Recognizer | None = None) -> None:
        """`max_tokens`: generated tokens at most for every task, in place of the settings' per-task limits;
        `workers`: page worker processes (None: QUIRE_PROCESS_WORKERS, else as many as the machine has cores for;
        0: this thread); `page_images`: encode each page's PNGs for a writer (FinishedPage.images); `recognizer`:
        one to use in place of the engine's (a benchmark's, which sets each region's budget)."""
        self.settings, self.max_tokens = settings, max_tokens
        self.layout = layout_backend(settings.layout, settings.layout_model, layout_device(settings))
        self.model = None if settings.model == NO_MODEL else str(settings.model)
        self.revision: str | None = None
        self._engine, self._owns_engine = engine, engine is None
        self.recognizer: Recognizer = recognizer or LazyRecognizer(self._recognizer)
        ranges = parse_page_ranges(pages) if isinstance(pages, str) else pages
        options = process_options(settings, password=password, pages=ranges)
        self.options = replace(options, page_images=page_images,
                               pages_in_flight=pages_in_flight(settings) if self.model else options.pages_in_flight)
        self.workers = self._workers(workers)
        self._pool: PagePool | None = None

    @property
    def unavailable(self) -> ModelUnavailable | None:
        """Why regions were skipped: no model asked for, or the one asked for could not load; None otherwise."""
        return getattr(self.recognizer, "unavailable", None)

    def process(self, source: str | Path | bytes, name: str | None = None,
                on_page: PageCallback | None = None) -> DocumentOutput:
        """One document; `name` names bytes in the result (a path's file name otherwise)."""
        if isinstance(source, bytes) or self.workers == 0:
            if isinstance(source, bytes):
                document = process_document(source, name or "document", self.recognizer, self.layout, self.options,
                                            on_page, self.model)
            else:
                document = process_file(Path(source), self.recognizer, self.layout, self.options, on_page,
                                        self.model)
            return replace(document, model_revision=self.revision)
        callback = None if on_page is None else (lambda _, finished: on_page(finished))
        for _, document in self.process_many([Path(source)], callback):
            return document
        raise AssertionError("process_many yields every document it is given")

    def process_many(self, paths: Iterable[Path],
                     on_page: DocumentCallback | None = None) -> Iterator[tuple[int, DocumentOutput]]:
        """(position in `paths`, result) of each file as it completes, the next files' pages starting while the
        last ones of earlier files are still recognised; `on_page(position, page)` sees each page as it finishes.
        """
        inputs = (DocumentInput(Path(path), Path(path).name) for path in paths)
        for position, document in process_stream(inputs, self.recognizer, self._pages(), self.options, on_page,
                                                  self.model):
            yield position, replace(document, model_revision=self.revision)

    def start_workers(self, timeout: float = 60.0) -> bool:
        """Start the page workers now and wait until they are ready (a long-lived caller's warm-up); whether they
        are. Otherwise they start with the first document."""
        pages = self._pages()
        return pages.start(timeout) if isinstance(pages, PagePool) else True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._owns_engine and self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> DocumentProcessor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _pages(self) -> Pages:
        """The page workers, started on first use and kept for the processor's life; this thread when there are none."""
        if self.workers == 0:
            return InlinePages(self.layout, self.options)
        if self._pool is None:
            self._pool = PagePool(self.layout, self.options, self.workers, self._image_settings())
        return self._pool

    def _workers(self, asked: int | None) -> int:
        if asked is not None:
            return asked
        if self.settings.process_workers is not None:
            return self.settings.process_workers
        on_cpu = self.model is not None and resolve_device(self.settings.device).type == "cpu"
        return default_workers(engine_on_cpu=on_cpu)

    def _image_settings(self) -> ImageSettings | None:
        """The checkpoint's image settings when it is on this machine (never downloaded for this), so the workers cut
        crops to the model's grid; None otherwise, and the engine does it as each crop arrives."""
        directory = local_checkpoint(self.model) if self.model else None
        if directory is None:
            return None
        try:
            return ImageSettings.from_file(directory / "preprocessor_config.json")
        except CheckpointError:
            return None

    def _recognizer(self) -> Recognizer:
        """The engine's recognizer, loading the engine now (the first region that needs it is here)."""
        if self._engine is None:
            if self.model is None:
                raise ModelUnavailable.none_asked_for()
            try:
                self._engine = load_engine(self.model, self.settings)
            except CheckpointError as exc:  # LazyRecognizer skips the regions with the loader's code and message
                raise ModelUnavailable(exc.code, str(exc)) from exc
            self.revision = _revision(self.model, self.settings)
        return EngineRecognizer(self._engine, task_max_tokens(self.settings, self.max_tokens))


def _revision(model: str, settings: Settings) -> str | None:
    """model_revision, or None when it cannot be told (the result then names the model without it)."""
    try:
        return model_revision(model, settings)
    except (CheckpointError, OSError):
        return None
