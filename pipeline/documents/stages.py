"""A document's stages as functions of plain data, named once: what both ways of running the pipeline call to
open, lay out, recognise and finish a document, so they walk the same steps in the same order and write the same
JSON and Markdown.

    ingest: open_document (here) → prepare: process.lay_out, per page
      → recognize: process.recognized_region, per region for the model → finalize: process.document_status

The service's stages (pipeline/jobs/stages/, one task each, their state in the database, sent along
pipeline/jobs/graph.py) wrap each of them in their reads and writes; `quire process` (stream.py, its page work in
page_work.py, its state in memory) runs them through page workers and one recognizer. Where the layout is a model
that runs beside the engine, `quire process` lays a page out in lay_out's two halves (render_timed on a page
worker, then detect_all and finish_layout in batches), which are lay_out's own. tests/documents/test_stages.py
walks both over a document and compares.
"""

from __future__ import annotations

from pipeline.documents.process import ProcessOptions
from pipeline.documents.source import IngestedDocument, ingest


def open_document(data: bytes, options: ProcessOptions) -> IngestedDocument:
    """The ingest stage: the upload validated under the options' limits and opened (its password, if any), its
    pages counted; raises DocumentError for bad input. A later stage that only reopens it calls `ingest`."""
    return ingest(data, options.limits, options.password)

