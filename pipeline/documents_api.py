"""Documents in one call: `process("report.pdf")` → the result object, as `quire process` makes it.

`quire process` and this API build the same things around process_file: the layout backend the settings name,
the region and ingest options (pipeline/document_settings.py, as the service's stages do), and the recognition
model, loaded from the settings only when a region needs it (or the engine the caller already has). Settings come
from QUIRE_* variables; any Settings field can be given as a keyword instead (`layout="pdf"`, `model="none"`,
`dpi=150`, `max_pages=50`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings, get_settings
from pipeline.document_settings import process_options
from pipeline.documents.layout import layout_backend
from pipeline.documents.lazy_recognizer import LazyRecognizer, ModelUnavailable
from pipeline.documents.page_ranges import PageRanges, parse_page_ranges
from pipeline.documents.process import PageCallback, process_document, process_file
from pipeline.documents.recognize import EngineRecognizer, Recognizer
from pipeline.documents.results import DocumentOutput
from pipeline.engine_settings import layout_device, task_max_tokens, weights_scheme

if TYPE_CHECKING:
    from pipeline.engine.engine import Engine

NO_MODEL = "none"  # `--model none` / model="none": no recognition model; regions that need one are skipped


def process(source: str | Path | bytes, *, name: str | None = None, engine: Engine | None = None,
            password: str | None = None, pages: str | None = None, **settings: Any) -> DocumentOutput:
    """One document (a path, or its bytes) through the whole pipeline; `pages` as `1-5,9`; keywords override
    Settings fields. Bad input comes back as a failed result with its error code, never as an exception."""
    with DocumentProcessor(_settings(settings), engine, password, pages) as processor:
        return processor.process(source, name)


def _settings(overrides: dict[str, Any]) -> Settings:
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise TypeError(f"not a setting: {', '.join(unknown)} (see pipeline/config.py)")
    return get_settings().model_copy(update=overrides)


class DocumentProcessor:
    """The layout backend and the recognition model for many documents; close it to free the engine it loaded.

    Raises LayoutModelUnavailable at once when the settings ask for `pp-doclayout` without its weights; a missing
    recognition model only shows when a region needs it, as skipped regions (`unavailable` says why).
    """

    def __init__(self, settings: Settings, engine: Engine | None = None, password: str | None = None,
                 pages: str | PageRanges | None = None, max_tokens: int | None = None) -> None:
        """`max_tokens`: generated tokens at most for every task, in place of the settings' per-task limits."""
        self.settings, self.max_tokens = settings, max_tokens
        self.layout = layout_backend(settings.layout, settings.layout_model, layout_device(settings))
        self.model = None if settings.model == NO_MODEL else str(settings.model)
        self.revision: str | None = None
        self._engine, self._owns_engine = engine, engine is None
        self.recognizer = LazyRecognizer(self._recognizer)
        ranges = parse_page_ranges(pages) if isinstance(pages, str) else pages
        self.options = process_options(settings, password=password, pages=ranges)

    @property
    def unavailable(self) -> ModelUnavailable | None:
        """Why regions were skipped: no model asked for, or the one asked for could not load; None otherwise."""
        return self.recognizer.unavailable

    def process(self, source: str | Path | bytes, name: str | None = None,
                on_page: PageCallback | None = None) -> DocumentOutput:
        """One document; `name` names bytes in the result (a path's file name otherwise)."""
        if isinstance(source, bytes):
            document = process_document(source, name or "document", self.recognizer, self.layout, self.options,
                                        on_page, self.model)
        else:
            document = process_file(Path(source), self.recognizer, self.layout, self.options, on_page, self.model)
        return replace(document, model_revision=self.revision)

    def close(self) -> None:
        if self._owns_engine and self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> DocumentProcessor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _recognizer(self) -> Recognizer:
        """The engine's recognizer, loading the engine now (the first region that needs it is here)."""
        if self._engine is None:
            self._engine = load_engine(self.model, self.settings)
            self.revision = model_revision(self.model, weights_scheme(self.settings))
        return EngineRecognizer(self._engine, task_max_tokens(self.settings, self.max_tokens))


def load_engine(model: str | None, settings: Settings) -> Engine:
    """The engine on `model`; ModelUnavailable (with the loader's code and message: what is wrong, how to get it)
    if it cannot load, or if no model was asked for."""
    from pipeline.engine.engine import Engine
    from pipeline.engine.errors import CheckpointError
    from pipeline.engine_settings import engine_kwargs

    if model is None:
        raise ModelUnavailable("model_none", "no recognition model was asked for (model none)")
    try:
        return Engine.from_pretrained(model, **engine_kwargs(settings))
    except CheckpointError as exc:
        raise ModelUnavailable(exc.code, str(exc)) from exc


def model_revision(model: str | None, scheme: str = "none") -> str | None:
    """The hub commit or the weights' fingerprint (see revision.py), or None when it cannot be told."""
    from pipeline.engine.errors import CheckpointError
    from pipeline.engine.model.loader import resolve_checkpoint
    from pipeline.engine.model.revision import checkpoint_revision

    if model is None:
        return None
    try:
        return checkpoint_revision(resolve_checkpoint(model), scheme)
    except (CheckpointError, OSError):
        return None
