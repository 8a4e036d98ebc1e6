"""The embedded mode's workers: the same stages the Celery tasks run, on thread pools inside the API process.

`quire serve` without a broker uses this, so a single machine needs no Redis and no worker processes. Work sent
here lives in memory only; what the database says is unfinished is sent again when the service starts
(`resume`), and every stage is idempotent, so a restart loses no document. While it runs, a thread reaps every
QUIRE_REAP_INTERVAL_S (pipeline.jobs.reaper): a document whose work was lost anyway is sent again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select

from pipeline.config import Settings
from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.jobs.context import RecognitionHost, open_context
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.graph import queues, run_stage
from pipeline.jobs.model_status import ModelStatus
from pipeline.jobs.reaper import ReaperThread
from pipeline.jobs.start import resume_deliveries, start_document

log = logging.getLogger(__name__)
RETRIES = 3  # a stage that raises (the database busy, say) is run again this many times, backing off


class EmbeddedWorkers:
    """A Dispatcher that runs each stage on its queue's thread pool in this process.

    It opens its own Context (itself its dispatcher) and closes it in `close`; the embedded API serves from that
    same Context, so the service has one database engine and one blob store.
    """

    def __init__(self, settings: Settings, recognition: RecognitionHost, cpu_threads: int = 2,
                 gpu_threads: int = 4) -> None:
        self.context = open_context(settings, self, recognition)
        self._queues = queues(settings)
        self._pools = {"cpu": ThreadPoolExecutor(cpu_threads, thread_name_prefix="quire-cpu"),
                       "gpu": ThreadPoolExecutor(gpu_threads, thread_name_prefix="quire-gpu")}
        self._waiting = Counter[str]()
        self._lock = threading.Lock()
        self._timers: set[threading.Thread] = set()  # sends waiting out their delay
        self._timers_lock = threading.Lock()
        self._closed = False
        self._reaper = ReaperThread(self.context)
        self._reaper.start()

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        if delay_s > 0:
            self._send_later(stage, key, delay_s)
            return
        with self._lock:
            self._waiting[self._queues[stage]] += 1
        self._pools[self._queues[stage]].submit(self._run, stage, key)

    def queue_depths(self) -> dict[str, int]:
        with self._lock:
            return {queue: self._waiting[queue] for queue in self._pools}

    def engine_stats(self) -> dict[str, int] | None:
        recognition = self.context.recognition
        stats = getattr(recognition, "stats", None)
        return stats() if stats is not None else None

    def model_statuses(self) -> list[ModelStatus]:
        """The in-process host's model status: `quire serve` loads the engine at start, and a load tried again by
        a region (after a failure) updates it."""
        status = getattr(self.context.recognition, "status", None)
        return [status] if status is not None else []

    def resume(self) -> int:
        """Start again every document not finished (its first stage passes each page to where it stopped), and
        send every webhook attempt still to make (their timers did not survive the restart)."""
        with session_scope(self.context.db) as session:
            unfinished = session.scalars(select(Document.id).where(Document.status.in_(("queued", "processing"))))
            ids = list(unfinished)
        for document_id in ids:
            start_document(self, document_id)
        return len(ids) + resume_deliveries(self.context.db, self)

    def close(self) -> None:
        self._reaper.stop()
        with self._timers_lock:
            self._closed = True
            for timer in self._timers:
                timer.cancel()
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self.context.close()

    def _send_later(self, stage: Stage, key: str | int, delay_s: float) -> None:
        timer = threading.Timer(delay_s, self._send_now, (stage, key))
        timer.daemon = True
        with self._timers_lock:
            if self._closed:
                return
            self._timers.add(timer)
        timer.start()

    def _send_now(self, stage: Stage, key: str | int) -> None:
        """A timer's send; under the lock close takes first, so nothing reaches a pool that is shutting down."""
        with self._timers_lock:
            self._timers.discard(threading.current_thread())
            if not self._closed:
                self.send(stage, key)

    def _run(self, stage: Stage, key: str | int) -> None:
        with self._lock:
            self._waiting[self._queues[stage]] -= 1
        for attempt in range(RETRIES + 1):
            try:
                run_stage(self.context, stage, key)
                return
            except Exception:  # run_stage logged it with its traceback
                log.warning("%s(%s) failed (attempt %d of %d)", stage, key, attempt + 1, RETRIES + 1)
                time.sleep(0.5 * 2**attempt)
