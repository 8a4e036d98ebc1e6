"""Cancel on the distributed service (real Postgres, Redis and Celery workers): a document canceled while its pages
are being worked on ends `canceled`, and no region row is written or changed after the cancel answers."""

from __future__ import annotations

import time

import httpx
from sqlalchemy import create_engine, func, select

from pipeline.db.models import Page, Region
from tests.service.conftest import Service
from tests.service.test_documents import one_page_pdf, upload, wait_until_final


def region_rows(service: Service, document_id: str) -> tuple:
    database = create_engine(service.database_url)
    try:
        with database.connect() as connection:
            return tuple(connection.execute(
                select(Region.status, func.count(), func.sum(Region.attempts), func.max(Region.updated_at))
                .join(Page).where(Page.document_id == document_id).group_by(Region.status).order_by(Region.status)
            ).all())
    finally:
        database.dispose()


def test_a_document_canceled_mid_way_ends_canceled_with_no_region_row_written_after(distributed: Service):
    document = upload(distributed, one_page_pdf("A long document to cancel", pages=60), "long.pdf")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = httpx.get(f"{distributed.url}/v1/documents/{document['id']}", headers=distributed.headers(),
                           timeout=10).json()
        if status["progress"]["pages"]["done"] >= 1:
            break
        time.sleep(0.05)
    canceled = httpx.post(f"{distributed.url}/v1/documents/{document['id']}/cancel", headers=distributed.headers(),
                          timeout=10)
    assert (canceled.status_code, canceled.json()["status"]) == (200, "canceled"), canceled.text
    assert canceled.json()["progress"]["pages"]["done"] < 60  # it was stopped mid-way
    rows = region_rows(distributed, document["id"])
    time.sleep(3.0)  # tasks queued or running meanwhile find the document canceled
    assert region_rows(distributed, document["id"]) == rows
    assert wait_until_final(distributed, document["id"])["status"] == "canceled"
