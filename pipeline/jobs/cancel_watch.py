"""One watcher per process for the documents whose recognize tasks wait on the engine: every poll it reads their
statuses in one query and aborts the work of any canceled or deleted since.

Each waiting task used to poll the database itself; a GPU worker runs a dozen or more of them, and on a small
machine their queries took the GIL from the engine loop that shares the process. One query for all of them costs
the same however many wait. A poll that fails (the database away) is logged and tried again at the next one; the
tasks go on waiting for the engine meanwhile, and their writes still find a cancel under the document's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count

from sqlalchemy import Engine, select

from pipeline.db.models import Document
from pipeline.db.session import reading

log = logging.getLogger("quire.cancels")
CANCEL_POLL_S = 0.5  # how often the documents that tasks wait on are looked at


class CancelWatch:
    def __init__(self, db: Engine, poll_s: float = CANCEL_POLL_S) -> None:
        self.db, self.poll_s = db, poll_s
        self._aborts: dict[int, tuple[str, Callable[[], None]]] = {}  # registration → (document id, abort)
        self._ids = count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, document_id: str, abort: Callable[[], None]) -> Iterator[None]:
        """While the block runs, call `abort` (once, from the watcher's thread) when the document is canceled or
        deleted."""
        with self._lock:
            key = next(self._ids)
            self._aborts[key] = (document_id, abort)
            self._start()
        try:
            yield
        finally:
            with self._lock:
                self._aborts.pop(key, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="quire-cancels")
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:
                log.warning("looking for canceled documents failed", exc_info=True)

    def poll(self) -> None:
        """Abort the work of every watched document that is canceled or gone."""
        with self._lock:
            watched = {document_id for document_id, _ in self._aborts.values()}
        if not watched:
            return
        with reading(self.db) as connection:
            live = set(connection.scalars(select(Document.id).where(Document.id.in_(watched),
                                                                    Document.status != "canceled")))
        with self._lock:
            ended = [key for key, (document_id, _) in self._aborts.items()
                     if document_id in watched and document_id not in live]
            aborts = [self._aborts.pop(key)[1] for key in ended]
        for abort in aborts:
            abort()
