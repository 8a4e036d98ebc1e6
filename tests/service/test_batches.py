"""A batch on the distributed service (real Postgres, Redis and Celery workers): a zip of five PDFs and a text file
is five documents that all succeed and one rejected member, and the batch is done, and finished, once they have."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.archives import zip_bomb, zip_of
from tests.receiver import receiver
from tests.service.conftest import Service
from tests.service.test_documents import one_page_pdf


def wait_until_done(service: Service, status_url: str, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = httpx.get(status_url, headers=service.headers(), timeout=10).json()
        if status["done"]:
            return status
        time.sleep(0.2)
    raise AssertionError(f"the batch is not done after {timeout_s} s: {status['statuses']}\n{service.tail()}")


def test_a_zip_of_five_pdfs_and_a_text_file_is_five_succeeded_documents_and_one_rejected(distributed: Service):
    members = [(f"batch/doc-{i}.pdf", one_page_pdf(f"Batch document {i}")) for i in range(5)]
    archive = zip_of([*members, ("batch/readme.txt", b"not a document")])
    with receiver() as hooks:
        response = httpx.post(f"{distributed.url}/v1/batches", data={"callback_url": hooks.url},
                              files={"file": ("batch.zip", archive, "application/zip")},
                              headers=distributed.headers(), timeout=60)
        assert response.status_code == 202, response.text
        body = response.json()
        assert [item["name"] for item in body["documents"]] == [name for name, _ in members]
        assert [(item["name"], item["code"]) for item in body["rejected"]] == [
            ("batch/readme.txt", "unsupported_format")]
        status = wait_until_done(distributed, body["status_url"])
        hooks.wait_for(1)
        time.sleep(1.0)  # a second webhook, if one were coming, would arrive by now
    assert [(request.event["type"], request.event["data"]["id"]) for request in hooks.received] == [
        ("batch.finished", body["id"])]  # one for the batch, none for its documents
    assert status["statuses"]["succeeded"] == 5, status
    assert status["progress"]["documents"] == {"done": 5, "total": 5}
    assert status["progress"]["pages"] == {"done": 5, "total": 5}
    assert [document["status"] for document in status["documents"]] == ["succeeded"] * 5
    assert status["finished_at"] is not None  # set in the transaction that finished the last document
    other = httpx.get(body["status_url"], headers=distributed.headers("globex"), timeout=10)
    assert (other.status_code, other.json()["error"]["code"]) == (404, "batch_not_found")


def test_a_zip_bomb_and_a_dot_dot_member_are_refused_whole_with_nothing_created(distributed: Service):
    before = httpx.get(f"{distributed.url}/v1/batches", headers=distributed.headers(), timeout=10).json()["items"]
    escaping = zip_of([("ok.pdf", one_page_pdf("fine")), ("../evil.pdf", one_page_pdf("evil"))])
    for archive, code in ((zip_bomb(32 << 20), "archive_bomb"), (escaping, "unsafe_member_name")):
        response = httpx.post(f"{distributed.url}/v1/batches", files={"file": ("scans.zip", archive)},
                              headers=distributed.headers(), timeout=60)
        assert (response.status_code, response.json()["error"]["code"]) == (422, code)
    after = httpx.get(f"{distributed.url}/v1/batches", headers=distributed.headers(), timeout=10).json()["items"]
    assert after == before
