"""Duplicate delivery on the distributed service (real Postgres, Redis and Celery workers): every stage's task
delivered a second time — after its document finished, and while the first delivery is still in flight — writes
no second row, counts no page twice and finalizes the document once.

What "not done twice" can mean here: a page is finished by one conditional update, in the transaction that counts
it, so pages_done ends at page_count; a task for a page already finished passes it on without writing, so its
regions keep their attempts (1) and their updated_at; finalize sets the final status once, so a finished
document's result_key, finished_at and updated_at do not change.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

from sqlalchemy import create_engine, select

from pipeline.config import Settings
from pipeline.db.models import Document, Page, Region
from tests.service.conftest import Service
from tests.service.test_documents import one_page_pdf, upload, wait_until_final
from workers.celery_app import CeleryDispatcher, create_celery

PAGES = 4
FINISHED = ("succeeded", "partial", "failed")


def dispatcher(service: Service) -> CeleryDispatcher:
    return CeleryDispatcher(create_celery(Settings(broker_url=service.env["QUIRE_BROKER_URL"])))


def rows(service: Service, document_id: str) -> dict:
    """The document's, pages' and regions' rows as the workers left them."""
    database = create_engine(service.database_url)
    try:
        with database.connect() as connection:
            document = connection.execute(select(Document.status, Document.pages_done, Document.page_count,
                                                 Document.result_key, Document.finished_at, Document.updated_at)
                                          .where(Document.id == document_id)).one()
            pages = connection.execute(select(Page.id, Page.status, Page.updated_at)
                                       .where(Page.document_id == document_id).order_by(Page.index)).all()
            regions = connection.execute(select(Region.page_id, Region.index, Region.status, Region.attempts,
                                                Region.updated_at).join(Page)
                                         .where(Page.document_id == document_id)
                                         .order_by(Region.page_id, Region.index)).all()
    finally:
        database.dispose()
    return {"document": tuple(document), "pages": [tuple(page) for page in pages],
            "regions": [tuple(region) for region in regions]}


def page_ids(service: Service, document_id: str, timeout_s: float = 30.0) -> list[int]:
    """The document's pages, as soon as ingest has added them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pages = [page[0] for page in rows(service, document_id)["pages"]]
        if len(pages) == PAGES:
            return pages
        time.sleep(0.05)
    raise AssertionError(f"ingest added no pages in {timeout_s} s\n{service.tail()}")


def runs(service: Service) -> Counter:
    """(stage, key) → how many times a worker finished running it, from the workers' JSON logs."""
    counted: Counter = Counter()
    for log in service.logs[1:]:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"outcome"' in line:
                record = json.loads(line)
                counted[record["stage"], record.get("page_id", record.get("document_id"))] += 1
    return counted


def wait_for_runs(service: Service, expected: Counter, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not expected - runs(service):
            return
        time.sleep(0.1)
    raise AssertionError(f"the duplicate tasks did not all run in {timeout_s} s\n{service.tail()}")


def deliver_again(service: Service, document_id: str, pages: list[int]) -> Counter:
    """Send every stage's task for the document a second time; what the workers' run counts must reach."""
    send = dispatcher(service).send
    before = runs(service)
    send("ingest", document_id)
    for page_id in pages:
        send("prepare", page_id)
        send("recognize", page_id)
    send("finalize", document_id)
    return before + Counter([("ingest", document_id), ("finalize", document_id),
                             *(("prepare", page_id) for page_id in pages),
                             *(("recognize", page_id) for page_id in pages)])


def assert_done_once(state: dict) -> None:
    """Final (the tiny engine's output decides between succeeded, partial and failed), every page counted once,
    one row per region, each recognised once."""
    status, pages_done, page_count, result_key, finished_at, _ = state["document"]
    assert status in FINISHED and (pages_done, page_count) == (PAGES, PAGES)
    assert result_key is not None and finished_at is not None
    keys = [(page_id, index) for page_id, index, *_ in state["regions"]]
    assert len(keys) == len(set(keys)) >= PAGES  # one row per region, every page has one
    assert {attempts for *_, attempts, _ in state["regions"]} == {1}
    assert "pending" not in {status for _, _, status, _, _ in state["regions"]}


def test_tasks_delivered_again_after_their_document_finished_change_nothing(distributed: Service):
    document = upload(distributed, one_page_pdf(f"Delivered twice {uuid.uuid4().hex[:8]}", pages=PAGES), "twice.pdf")
    assert wait_until_final(distributed, document["id"], timeout_s=150)["status"] in FINISHED
    finished = rows(distributed, document["id"])
    assert_done_once(finished)
    wait_for_runs(distributed, deliver_again(distributed, document["id"], [page[0] for page in finished["pages"]]))
    time.sleep(0.5)  # what the duplicates passed on (finalize again) has run too
    assert rows(distributed, document["id"]) == finished


def test_tasks_delivered_twice_while_the_first_delivery_runs_finish_the_document_once(distributed: Service):
    document = upload(distributed, one_page_pdf(f"Raced twice {uuid.uuid4().hex[:8]}", pages=PAGES), "race.pdf")
    expected = deliver_again(distributed, document["id"], page_ids(distributed, document["id"]))
    assert wait_until_final(distributed, document["id"], timeout_s=150)["status"] in FINISHED
    wait_for_runs(distributed, expected)
    time.sleep(0.5)
    assert_done_once(rows(distributed, document["id"]))
