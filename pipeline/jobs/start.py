"""Where a document's work begins: the one way into the stage graph for an accepted upload or batch, and for a
document sent again (the reaper, the embedded mode's resume).

Callers never name a stage: which stage starts a document is the graph's business.
"""

from __future__ import annotations

from pipeline.jobs.batches import AcceptedBatch
from pipeline.jobs.dispatch import Dispatcher
from pipeline.jobs.graph import START
from pipeline.jobs.handoff import enter


def start_document(dispatcher: Dispatcher, document_id: str) -> None:
    """Start the document's work, or start it again: the first stage is idempotent and passes every page that is
    further along to where it stopped. Call it once the document's row has committed."""
    enter(dispatcher, START, document_id)


def start_batch(dispatcher: Dispatcher, accepted: AcceptedBatch) -> None:
    """Start the documents the batch created (the others repeat documents already started). Only once every
    document of the batch is recorded, so none of them finishes the batch before its siblings exist."""
    for document_id in accepted.created:
        start_document(dispatcher, document_id)
