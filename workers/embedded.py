"""The embedded mode's workers: the same stages the Celery tasks run, on thread pools inside the API process.

`quire serve` without a broker uses this, so a single machine needs no Redis and no worker processes. Work sent
here lives in memory only; what the database says is unfinished is sent again when the service starts
(`resume`), and every stage is idempotent, so a restart loses no document.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, select

from pipeline.config import Settings
from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.jobs.context import Context, RecognitionHost
from pipeline.jobs.dispatch import QUEUES, Stage
from pipeline.jobs.stages import STAGES
from pipeline.storage import BlobStore

log = logging.getLogger(__name__)
RETRIES = 3  # a stage that raises (the database busy, say) is run again this many times, backing off


class EmbeddedWorkers:
    """A Dispatcher that runs each stage on its queue's thread pool in this process."""

    def __init__(self, settings: Settings, db: Engine, blobs: BlobStore, recognition: RecognitionHost,
                 cpu_threads: int = 2, gpu_threads: int = 4) -> None:
        self.context = Context(settings, db, blobs, self, recognition)
        self._pools = {"cpu": ThreadPoolExecutor(cpu_threads, thread_name_prefix="quire-cpu"),
                       "gpu": ThreadPoolExecutor(gpu_threads, thread_name_prefix="quire-gpu")}

    def send(self, stage: Stage, key: str | int) -> None:
        self._pools[QUEUES[stage]].submit(self._run, stage, key)

    def resume(self) -> int:
        """Send ingest again for every document not finished (ingest passes each page to where it stopped)."""
        with session_scope(self.context.db) as session:
            unfinished = session.scalars(select(Document.id).where(Document.status.in_(("queued", "processing"))))
            ids = list(unfinished)
        for document_id in ids:
            self.send("ingest", document_id)
        return len(ids)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, stage: Stage, key: str | int) -> None:
        for attempt in range(RETRIES + 1):
            try:
                STAGES[stage](self.context, key)
                return
            except Exception:
                log.exception("%s(%s) failed (attempt %d of %d)", stage, key, attempt + 1, RETRIES + 1)
                time.sleep(0.5 * 2**attempt)
