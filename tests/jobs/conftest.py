"""An embedded service for the stage tests: SQLite and blobs in a temp directory, the real tiny engine (the
session's, shared as a worker process shares it), two CPU and two GPU threads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.db.migrate import upgrade_to_head
from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.jobs.options import DocumentOptions
from pipeline.jobs.start import start_document
from tests.jobs.expected import service_settings
from workers.embedded import EmbeddedWorkers
from workers.engine_host import EngineHost

FINAL = ("succeeded", "partial", "failed", "canceled")


@pytest.fixture
def service(tmp_path: Path, tiny_checkpoint: Path, engine_host: EngineHost) -> Iterator[EmbeddedWorkers]:
    with embedded_workers(service_settings(tmp_path, tiny_checkpoint), engine_host) as workers:
        yield workers


@contextmanager
def embedded_workers(settings: Settings, engine_host: EngineHost) -> Iterator[EmbeddedWorkers]:
    """Embedded workers (two CPU, two GPU threads) on a freshly migrated database of settings."""
    upgrade_to_head(settings.database_url)
    workers = EmbeddedWorkers(settings, engine_host, 2, 2)
    try:
        yield workers
    finally:
        workers.close()


def accept(workers: EmbeddedWorkers, data: bytes, name: str, tenant: str = "acme", send: bool = True,
           **options: object) -> str:
    """What the API does with an upload: the blob, then the row, then start its work."""
    ctx = workers.context
    key = ctx.blobs.put(data)
    resolved = DocumentOptions(**options).resolved(ctx.settings)
    with session_scope(ctx.db) as session:
        document = Document(tenant=tenant, filename=name, sha256=key, size_bytes=len(data),
                            options=resolved.model_dump())
        session.add(document)
        session.flush()
        document_id = document.id
    if send:
        start_document(workers, document_id)
    return document_id


def wait_until_final(workers: EmbeddedWorkers, document_id: str, timeout_s: float = 60.0) -> Document:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope(workers.context.db) as session:
            document = session.get_one(Document, document_id)
            if document.status in FINAL:
                return document
        time.sleep(0.05)
    raise AssertionError(f"document {document_id} still {document.status} after {timeout_s} s")
