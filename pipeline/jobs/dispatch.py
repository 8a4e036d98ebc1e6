"""What moves between stages and what carries it: a stage returns its sends (`Send`, plain data), and a Dispatcher
runs a named stage on a key, later, on the stage's queue.

Stage code never calls a dispatcher: it returns what it produced, and the graph's runner (pipeline/jobs/graph.py)
checks each send against the graph and makes it once the stage's transactions have committed. So the same stage
code runs under Celery (distributed mode, one task per stage on the `cpu` or `gpu` queue), under the embedded
mode's in-process thread pools, and in a test that only looks at what it returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from PIL import Image

from pipeline.jobs.model_status import ModelStatus

Stage = Literal["ingest", "prepare", "recognize", "finalize", "deliver"]  # pipeline/jobs/graph.py says what each is


@dataclass(frozen=True)
class Send:
    """One piece of work a stage passes on: run `stage` on `key`, not before `delay_s` seconds (a webhook retry's
    backoff). `image` is what the sender kept in memory for it (a prepared page's image, by its blob key): the
    runner leaves it in Context.page_images only where the stage runs in the sender's thread, and drops it
    otherwise."""

    stage: Stage
    key: str | int
    delay_s: float = 0.0
    image: tuple[str, Image.Image] | None = None


class Dispatcher(Protocol):
    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        """Run `stage` on `key` (the id its graph entry's key field names) later, on its queue, and not before
        delay_s seconds have passed (a webhook retry's backoff).

        Call it only after the transaction that made the work visible has committed: the worker that picks the
        task up reads that state from the database.
        """
        ...


@runtime_checkable
class Observable(Protocol):
    """A dispatcher that can say how much work waits (for /metrics)."""

    def queue_depths(self) -> dict[str, int]:
        """Tasks waiting per queue, not yet started."""
        ...

    def engine_stats(self) -> dict[str, int] | None:
        """The in-process engine's counters; None when the engine lives elsewhere or is not loaded."""
        ...


@runtime_checkable
class ModelReporting(Protocol):
    """A dispatcher that can say whether the recognition model loads where its recognize tasks run (for /readyz)."""

    def model_statuses(self) -> list[ModelStatus]:
        """What each recognition host it reaches last found out about its model; empty while none has found out."""
        ...
