"""The reaper on the embedded workers and the real tiny engine: a document whose tasks were lost is found once it
has not moved for a while, sent again, and completes; a document that is moving is left alone. (Completes: every
page done; whether the tiny engine's text makes a page succeed or fail is not this test's matter.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from pipeline.db.models import Document, Page, utcnow
from pipeline.db.session import session_scope
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.graph import run_stage
from pipeline.jobs.reaper import reap
from tests.jobs.conftest import accept, embedded_workers, wait_until_final
from tests.jobs.expected import CORPUS, service_settings
from workers.embedded import EmbeddedWorkers
from workers.engine_host import EngineHost

FOUR_PAGES = (CORPUS / "pdflatex-4-pages.pdf").read_bytes()
STALE_S = 60.0


@dataclass
class LosingDispatcher:
    """A broker that accepts every send and delivers none: the lost tasks the reaper is for."""

    lost: list[tuple[Stage, str | int]] = field(default_factory=list)

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        self.lost.append((stage, key))


def losing(workers: EmbeddedWorkers) -> Context:
    return replace(workers.context, dispatcher=LosingDispatcher())


def prepared_with_recognize_lost(workers: EmbeddedWorkers) -> str:
    """A document that went through ingest and prepare, whose recognize tasks were then lost."""
    ctx = losing(workers)
    document_id = accept(workers, FOUR_PAGES, "four.pdf", send=False)
    run_stage(ctx, "ingest", document_id)
    for stage, page_id in list(ctx.dispatcher.lost):
        assert stage == "prepare"
        run_stage(ctx, stage, page_id)
    assert {stage for stage, _ in ctx.dispatcher.lost} == {"prepare", "recognize"}
    return document_id


def age(workers: EmbeddedWorkers, document_id: str, seconds: float) -> None:
    """Move the document's and its pages' last change back in time, as if nothing had happened since."""
    past = utcnow() - timedelta(seconds=seconds)
    with session_scope(workers.context.db) as session:
        session.execute(update(Document).where(Document.id == document_id).values(updated_at=past))
        session.execute(update(Page).where(Page.document_id == document_id).values(updated_at=past))


def updated_at(workers: EmbeddedWorkers, document_id: str):
    with session_scope(workers.context.db) as session:
        return session.scalars(select(Document.updated_at).where(Document.id == document_id)).one()


def test_a_document_whose_recognize_tasks_were_lost_is_sent_again_once_and_completes(service):
    document_id = prepared_with_recognize_lost(service)
    assert reap(service.context, STALE_S) == []  # it moved a moment ago
    age(service, document_id, 2 * STALE_S)
    assert reap(service.context, STALE_S) == [document_id]
    assert reap(service.context, STALE_S) == []  # claimed: not sent twice for one stall
    document = wait_until_final(service, document_id)
    assert (document.error_code, document.pages_done, document.page_count) == (None, 4, 4)


def test_a_document_whose_pages_are_moving_is_not_touched(service):
    document_id = prepared_with_recognize_lost(service)
    age(service, document_id, 2 * STALE_S)
    with session_scope(service.context.db) as session:
        first_page = session.scalars(select(Page.id).where(Page.document_id == document_id)
                                     .order_by(Page.index)).first()
    run_stage(losing(service), "recognize", first_page)  # a page finishing counts on its document, which moves
    assert updated_at(service, document_id) > utcnow() - timedelta(seconds=STALE_S)
    age(service, document_id, 2 * STALE_S)
    with session_scope(service.context.db) as session:
        session.execute(update(Page).where(Page.id == first_page).values(updated_at=utcnow()))
    before = updated_at(service, document_id)
    assert reap(service.context, STALE_S) == []  # one page moved lately: the document is alive
    assert updated_at(service, document_id) == before


def test_a_finished_document_is_never_reaped(service):
    document_id = accept(service, FOUR_PAGES, "four.pdf")
    wait_until_final(service, document_id)
    age(service, document_id, 2 * STALE_S)
    assert reap(service.context, STALE_S) == []


@pytest.fixture
def reaping(tmp_path: Path, tiny_checkpoint: Path, engine_host: EngineHost) -> Iterator[EmbeddedWorkers]:
    """Embedded workers that reap every 0.2 s and take one second without a change for lost."""
    settings = service_settings(tmp_path, tiny_checkpoint).model_copy(update={"reap_interval_s": 0.2,
                                                                              "reap_after_s": 1.0})
    with embedded_workers(settings, engine_host) as workers:
        yield workers


def test_the_embedded_workers_reap_on_their_own(reaping):
    lost_ingest = accept(reaping, FOUR_PAGES, "four.pdf", send=False)
    document = wait_until_final(reaping, lost_ingest, timeout_s=60)
    assert (document.error_code, document.pages_done) == (None, 4)
