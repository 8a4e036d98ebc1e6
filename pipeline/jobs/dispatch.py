"""How one stage hands a document or page to the next: a named stage, a key, and the queue that runs it.

The stages only ever call `Dispatcher.send`, so the same stage code runs under Celery (distributed mode, one
task per stage on the `cpu` or `gpu` queue) and under the embedded mode's in-process thread pools.
"""

from __future__ import annotations

from typing import Literal, Protocol

Stage = Literal["ingest", "prepare", "recognize", "finalize"]

# ingest(document id) → prepare(page id) per page → recognize(page id) → finalize(document id) after the last page
QUEUES: dict[Stage, str] = {"ingest": "cpu", "prepare": "cpu", "recognize": "gpu", "finalize": "cpu"}


class Dispatcher(Protocol):
    def send(self, stage: Stage, key: str | int) -> None:
        """Run `stage` on `key` (a document id for ingest/finalize, a page id otherwise) later, on its queue.

        Call it only after the transaction that made the work visible has committed: the worker that picks the
        task up reads that state from the database.
        """
        ...
