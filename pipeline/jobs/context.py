"""What the stages and the API run with: settings, the database, the blob store, the dispatcher, and process-wide
models; `open_context` is the one place they are built from Settings.

One Context per worker process (or per embedded service, shared by its API and its workers): the layout backends
and the recognizer are loaded once and shared by every task the process runs, on all its threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol

from PIL import Image
from sqlalchemy import Engine

from pipeline.blob_url import open_blob_store
from pipeline.config import Settings
from pipeline.db.session import create_db_engine
from pipeline.documents.layout import LayoutBackend, layout_backend
from pipeline.documents.layout_weights import LayoutModelUnavailable
from pipeline.documents.recognizer import Recognizer
from pipeline.engine_settings import layout_device
from pipeline.jobs.cancel_watch import CancelWatch
from pipeline.jobs.dispatch import Dispatcher
from pipeline.storage import BlobStore


class RecognitionHost(Protocol):
    """The process's resident recognizer; `revision` names the exact weights, for the region result cache (None
    without a model: none asked for, `model` None too, or none on this machine)."""

    model: str | None

    @property
    def revision(self) -> str | None: ...

    def recognizer(self, tenant: str) -> Recognizer:
        """A recognizer whose prefix-cache entries are salted with the tenant, so tenants never share KV."""
        ...


class PageImages:
    """Page images that prepare leaves for the recognize the runner runs in its thread (graph.run_stage), by image
    key: recognition crops the image prepare rendered instead of reading its PNG back and decoding it. The key names
    the PNG's bytes, so an image found here is the one stored. Bounded, oldest out: a recognize that returns before
    taking its image (the document was deleted meanwhile) leaves it behind."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._images: OrderedDict[str, Image.Image] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: str, image: Image.Image) -> None:
        with self._lock:
            self._images[key] = image
            while len(self._images) > self.capacity:
                self._images.popitem(last=False)

    def take(self, key: str) -> Image.Image | None:
        with self._lock:
            return self._images.pop(key, None)

    def __len__(self) -> int:
        return len(self._images)


@dataclass
class Context:
    settings: Settings
    db: Engine
    blobs: BlobStore
    dispatcher: Dispatcher
    recognition: RecognitionHost | None = None  # GPU workers only
    page_images: PageImages = field(default_factory=PageImages, repr=False)
    cancels: CancelWatch = field(init=False, repr=False)  # its thread starts with the first recognize that waits
    _layouts: dict[str, LayoutBackend] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.cancels = CancelWatch(self.db)

    def layout(self, name: str) -> LayoutBackend:
        """The layout backend called name, loaded on first use (a layout model is loaded once per process)."""
        with self._lock:
            if name not in self._layouts:
                self._layouts[name] = layout_backend(name, self.settings.layout_model, layout_device(self.settings))
            return self._layouts[name]

    def preload_layout(self) -> None:
        """Load the default layout backend now, in a process that hosts the engine too: on a GPU the layout model
        must take its memory before the engine sizes its KV cache from what is free. Missing weights are left for
        each page to report, as they are without this."""
        with suppress(LayoutModelUnavailable):
            self.layout(self.settings.layout)

    def close(self) -> None:
        """Stop the cancel watcher and close the database's pooled connections (whoever opened the context closes
        it)."""
        self.cancels.close()
        self.db.dispose()


def open_context(settings: Settings, dispatcher: Dispatcher, recognition: RecognitionHost | None = None) -> Context:
    """The service's composition root: the database engine and the blob store the settings name, with the given
    dispatcher (Celery, the embedded workers, a test's stand-in) and, in a process that hosts the engine, its
    recognition host. `quire serve` (either mode), every `quire worker` process, the embedded workers and the tests
    all build their Context here, so the API and the stages never see differently built parts. A blob store that
    cannot be used stops it with BlobStoreUnavailable, before anything is started on it."""
    blobs = open_blob_store(settings)
    blobs.check()
    return Context(settings, create_db_engine(settings.database_url), blobs, dispatcher, recognition)
