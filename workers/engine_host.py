"""The resident engine of a GPU worker process: loaded once, on the first region, and shared by all its threads.

Every recognize task of the process submits its page's regions to this one engine, so regions of as many pages
as the worker has threads are in flight together and batch in the same engine steps. A process that lays pages
out too loads its layout model before the engine (Context.preload_layout), since the engine's KV cache takes a
share of the GPU memory then free.
"""

from __future__ import annotations

import threading
from functools import cached_property

from transformers import AutoTokenizer  # noqa: F401 - see below

from pipeline.config import Settings
from pipeline.documents.lazy_recognizer import ABSENT, NO_MODEL, ModelUnavailable, SkippingRecognizer
from pipeline.documents.recognizer import EngineRecognizer, Recognizer
from pipeline.engine.engine import Engine
from pipeline.engine.host_memory import bound_onednn_caches
from pipeline.engine.model.errors import CheckpointError
from pipeline.engine.model.loader import resolve_checkpoint
from pipeline.engine.verify import CHECKS
from pipeline.engine_settings import task_max_tokens
from pipeline.jobs.model_status import ModelStatus
from pipeline.model_loading import load_engine, model_revision

NONE_ASKED_FOR = ModelStatus(NO_MODEL, "model_none", str(ModelUnavailable.none_asked_for()))


class EngineHost:
    """A RecognitionHost (pipeline.jobs.context) on an in-process Engine.

    AutoTokenizer is imported with this module, on the thread that starts the worker: transformers resolves its
    names lazily, and two task threads resolving it at once have failed with an ImportError.
    """

    def __init__(self, settings: Settings) -> None:
        bound_onednn_caches(settings.onednn_cache_entries)  # at the process's start, before any model runs a step
        self.settings = settings
        self.model = None if settings.model == NO_MODEL else settings.model  # None: none asked for (`--model none`)
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._status = NONE_ASKED_FOR if self.model is None else None

    @property
    def revision(self) -> str | None:
        """Keys cached results; None while there is no model (none asked for, or not on this machine): its regions
        are skipped, and nothing is recalled or remembered for them."""
        if self.model is None:
            return None
        try:
            return self._revision
        except CheckpointError as exc:
            if exc.code in ABSENT:
                return None
            raise

    @cached_property
    def _revision(self) -> str:
        """The hub commit, or a fingerprint that reads a few MB, never the whole weights."""
        assert self.model is not None
        try:
            return model_revision(self.model, self.settings)
        except Exception as exc:  # the first thing a region asks of a missing checkpoint: /readyz must hear of it
            self._status = ModelStatus.failed(self.model, exc)
            raise

    @property
    def engine(self) -> Engine:
        """The engine, loaded on first use; a load that fails is tried again by the next region (the checkpoint may
        have been fixed meanwhile), and each outcome becomes the model's status. CheckpointError when it does not
        load; ModelUnavailable when none was asked for."""
        if self.model is None:
            raise ModelUnavailable.none_asked_for()
        with self._lock:
            if self._engine is None:
                try:
                    self._engine = load_engine(self.model, self.settings)
                except Exception as exc:
                    self._status = ModelStatus.failed(self.model, exc)
                    raise
                self._status = ModelStatus(self.model)
            return self._engine

    def load(self) -> ModelUnavailable | None:
        """Load the engine now (`quire serve` does at start, not on the first page); why there is none when none
        was asked for or it is not on this machine, the service then running without it as `quire process` does.
        A model that is there but broken raises CheckpointError."""
        try:
            self.engine  # noqa: B018 - a property that loads it
        except ModelUnavailable as exc:
            return exc
        except CheckpointError as exc:
            if exc.code not in ABSENT:
                raise
            return ModelUnavailable(exc.code, str(exc))
        return None

    @property
    def status(self) -> ModelStatus | None:
        """Whether the model loads, as the last check or load found; None while nothing has tried."""
        return self._status

    def check(self) -> ModelStatus:
        """Whether the checkpoint would load, found without loading it (config, tensor names and shapes from the
        safetensors headers, tokenizer and template: seconds, no memory), so a GPU worker can report a missing or
        broken model at start while its engine still waits for the first region. A loaded engine is its own proof."""
        if self.model is None:  # nothing to check
            return NONE_ASKED_FOR
        with self._lock:
            if self._engine is None:
                self._status = _checked(self.model)
            return self._status or ModelStatus(self.model)

    def stats(self) -> dict[str, int] | None:
        """The engine's counters, or None before it is loaded (a scrape never loads it)."""
        engine = self._engine
        return None if engine is None else engine.stats()

    def recognizer(self, tenant: str) -> Recognizer:
        """The engine's, its prefix cache salted with the tenant; without a model one that skips every region with
        the reason (each call tries the load again, so weights pulled meanwhile are taken up)."""
        unavailable = self.load()
        if unavailable is not None:
            return SkippingRecognizer(unavailable)
        return EngineRecognizer(self.engine, task_max_tokens(self.settings), cache_salt=tenant)

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None


def _checked(model: str) -> ModelStatus:
    try:
        directory = resolve_checkpoint(model)
        for _, run in CHECKS:
            run(directory)
    except Exception as exc:  # any failure is the verdict on this checkpoint
        return ModelStatus.failed(model, exc)
    return ModelStatus(model)
