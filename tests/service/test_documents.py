"""Upload → poll → result through the REST API, in both modes: the embedded `quire serve` and the distributed
one (Postgres, Redis, a CPU and a GPU Celery worker). The result must be what `quire process` gives for the file."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import unquote

import httpx
from sqlalchemy import create_engine, func, select

from pipeline.db.models import Page, Region
from tests.documents.samples import ENCRYPTED, build_pdf, stream_object
from tests.jobs.expected import (
    CORPUS,
    comparable,
    pdf_with_an_unrenderable_page,
    picture_targets,
    processed,
    service_settings,
    without_picture_targets,
    written,
)
from tests.service.conftest import Service

FOUR_PAGES = (CORPUS / "pdflatex-4-pages.pdf").read_bytes()
FINAL = {"succeeded", "partial", "failed", "canceled"}


def upload(service: Service, data: bytes, name: str, **fields: str) -> dict[str, Any]:
    response = httpx.post(f"{service.url}/v1/documents", files={"file": (name, data, "application/octet-stream")},
                          data=fields, headers=service.headers(), timeout=30)
    assert response.status_code in (200, 202), response.text
    return response.json()


def wait_until_final(service: Service, document_id: str, timeout_s: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = httpx.get(f"{service.url}/v1/documents/{document_id}", headers=service.headers(), timeout=10).json()
        if status["status"] in FINAL:
            return status
        time.sleep(0.1)
    raise AssertionError(f"{document_id} is still {status['status']} after {timeout_s} s\n{service.tail()}")


def result(service: Service, document_id: str, kind: str) -> httpx.Response:
    response = httpx.get(f"{service.url}/v1/documents/{document_id}/result", params={"format": kind},
                         headers=service.headers(), timeout=10)
    assert response.status_code == 200, response.text
    return response


def test_a_pdf_uploaded_and_polled_gives_what_quire_process_gives(service, tiny_checkpoint, engine_host, tmp_path):
    document = upload(service, FOUR_PAGES, "four.pdf")
    status = wait_until_final(service, document["id"])
    assert status["status"] == "succeeded", service.tail()
    assert status["progress"]["pages"] == {"done": 4, "total": 4}
    expected, markdown = processed(FOUR_PAGES, "four.pdf", service_settings(tmp_path, tiny_checkpoint),
                                   engine_host.engine)
    assert comparable(result(service, document["id"], "json").json()) == comparable(expected)
    assert result(service, document["id"], "markdown").text == markdown


def test_a_scan_says_it_was_laid_out_as_one_page_region_and_why_as_quire_process_does(service, tiny_checkpoint,
                                                                                      engine_host, tmp_path):
    scan = (CORPUS / "grayscale-image.pdf").read_bytes()
    document = upload(service, scan, "scan.pdf")
    assert wait_until_final(service, document["id"])["status"] == "succeeded", service.tail()
    expected, _ = processed(scan, "scan.pdf", service_settings(tmp_path, tiny_checkpoint), engine_host.engine)
    served = result(service, document["id"], "json").json()
    assert [(page["layout"], page["layout_reason"]) for page in served["pages"]] == [("page", "no text layer")]
    assert comparable(served) == comparable(expected)
    page = httpx.get(f"{service.url}/v1/documents/{document['id']}/pages/1", headers=service.headers(),
                     timeout=10).json()
    assert (page["layout"], page["layout_reason"]) == ("page", "no text layer")


def test_a_picture_links_to_its_served_crop_where_quire_process_links_the_crop_file_it_saves(
        service, tiny_checkpoint, engine_host, tmp_path):
    data = (CORPUS / "pdflatex-image.pdf").read_bytes()
    document = upload(service, data, "picture.pdf")
    assert wait_until_final(service, document["id"])["status"] == "succeeded", service.tail()
    _, expected = written(data, "picture.pdf", service_settings(tmp_path, tiny_checkpoint), engine_host.engine,
                          tmp_path / "out")
    markdown = result(service, document["id"], "markdown").text
    assert without_picture_targets(markdown) == without_picture_targets(expected)
    links, files = picture_targets(markdown), picture_targets(expected)
    assert len(links) == len(files) == 1 and links[0].startswith(f"/v1/documents/{document['id']}/pages/1/regions/")
    crop = httpx.get(f"{service.url}{links[0]}", headers=service.headers(), timeout=10)
    assert crop.headers["content-type"] == "image/png"
    assert crop.content == (tmp_path / "out" / unquote(files[0])).read_bytes()
    html = httpx.get(f"{service.url}/v1/documents/{document['id']}/pages/1/html", headers=service.headers(),
                     timeout=10).text
    assert f'<img src="{links[0]}" alt="image">' in html


def test_an_encrypted_pdf_fails_with_encrypted(service):
    document = upload(service, (CORPUS / ENCRYPTED).read_bytes(), "locked.pdf")
    status = wait_until_final(service, document["id"])
    assert (status["status"], status["error"]["code"]) == ("failed", "encrypted")


def test_a_pdf_with_one_unrenderable_page_is_partial(service):
    document = upload(service, pdf_with_an_unrenderable_page(), "bomb.pdf")
    assert wait_until_final(service, document["id"])["status"] == "partial"
    pages = result(service, document["id"], "json").json()["pages"]
    assert [(page["status"], (page["error"] or {}).get("code")) for page in pages] == [
        ("succeeded", None), ("failed", "page_too_large")]


def test_the_same_upload_twice_is_one_document(service):
    data = one_page_pdf("twice")
    first, second = upload(service, data, "a.pdf"), upload(service, data, "b.pdf")
    assert first["id"] == second["id"]
    listed = httpx.get(f"{service.url}/v1/documents", params={"limit": 200}, headers=service.headers(),
                       timeout=10).json()
    assert [item["id"] for item in listed["items"]].count(first["id"]) == 1


def test_twenty_documents_uploaded_at_once_all_succeed_with_one_row_per_region(service):
    """Two GPU threads (QUIRE_GPU_THREADS / --concurrency 2) feed one engine with the pages of 20 documents."""
    uploads = [(f"doc-{i}.pdf", one_page_pdf(f"Document number {i}", pages=1 + i % 2)) for i in range(20)]

    async def upload_all() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=service.url, headers=service.headers(), timeout=60) as client:
            responses = await asyncio.gather(*(client.post("/v1/documents", files={"file": (name, data)})
                                               for name, data in uploads))
        assert all(response.status_code == 202 for response in responses), [r.text for r in responses]
        return [response.json() for response in responses]

    documents = asyncio.run(upload_all())
    assert len({document["id"] for document in documents}) == 20
    statuses = [wait_until_final(service, document["id"], timeout_s=180) for document in documents]
    assert {status["status"] for status in statuses} == {"succeeded"}, service.tail()
    database = create_engine(service.database_url)
    try:
        with database.connect() as connection:
            for document in documents:
                regions = result(service, document["id"], "json").json()["pages"]
                expected = sum(len(page["regions"]) for page in regions)
                rows = connection.execute(
                    select(Region.page_id, Region.index, func.count(), func.min(Region.status))
                    .join(Page).where(Page.document_id == document["id"]).group_by(Region.page_id, Region.index)
                ).all()
                assert len(rows) == expected > 0
                assert all(count == 1 and status == "succeeded" for _, _, count, status in rows)
    finally:
        database.dispose()


def one_page_pdf(text: str, pages: int = 1) -> bytes:
    """A PDF whose pages each say `text` (and their number) in Helvetica."""
    contents = {10 + i: stream_object(f"BT /F1 28 Tf 72 700 Td ({text}, page {i + 1}) Tj ET".encode())
                for i in range(pages)}
    font = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    return build_pdf([f"/MediaBox [0 0 612 792] /Resources << /Font << /F1 9 0 R >> >> /Contents {10 + i} 0 R"
                      for i in range(pages)], {9: font, **contents})
