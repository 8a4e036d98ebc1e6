"""POST /v1/documents: durable before 202, limits while streaming, sniffed formats, options, replays and dedup."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, update

from api.app import create_app
from api.upload import FLUSH_BYTES
from pipeline.config import Settings
from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.jobs.context import open_context
from pipeline.storage import LocalBlobStore
from tests.api.conftest import MAX_UPLOAD_BYTES, RecordingDispatcher, corpus, png, stored_files, upload


def documents(db: Engine) -> list[Document]:
    with session_scope(db) as session:
        return list(session.scalars(select(Document).order_by(Document.created_at)))


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


def test_an_upload_is_stored_recorded_and_sent_to_ingest_before_the_answer(
        client: TestClient, db: Engine, blobs: LocalBlobStore, dispatcher: RecordingDispatcher) -> None:
    data = corpus()
    response = upload(client, data, filename="reports/2024/q1 report.pdf")
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and body["filename"] == "q1 report.pdf" and body["size"] == len(data)
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert response.headers["location"] == body["status_url"] == f"http://testserver/v1/documents/{body['id']}"
    [document] = documents(db)
    assert (document.id, document.tenant, document.sha256, document.size_bytes) == (body["id"], "acme",
                                                                                   body["sha256"], len(data))
    assert document.options["layout"] == "auto" and document.options["tasks"] == ["formula", "ocr", "table"]
    assert blobs.get(document.sha256) == data
    assert dispatcher.sent == [("ingest", document.id)]
    assert client.get(body["status_url"]).json()["status"] == "queued"


def test_options_come_as_form_fields(client: TestClient, db: Engine) -> None:
    response = upload(client, corpus(), layout="pdf", dpi="150", tasks=["table", "ocr,formula"], text_layer="off",
                      callback_url="https://example.com/hook", password="")
    assert response.status_code == 202, response.text
    [document] = documents(db)
    assert document.options == {"layout": "pdf", "dpi": 150, "tasks": ["formula", "ocr", "table"],
                                "text_layer": "off", "password": None, "callback_url": "https://example.com/hook"}


def test_bad_options_are_refused_with_pydantic_s_reason_and_nothing_is_kept(
        client: TestClient, db: Engine, settings: Settings, dispatcher: RecordingDispatcher) -> None:
    for options, where in [({"dpi": "9000"}, "dpi"), ({"tasks": "ocr,poetry"}, "tasks"),
                           ({"layout": "magic"}, "layout"), ({"colour": "blue"}, "colour"),
                           ({"dpi": ["100", "200"]}, "dpi")]:
        error = assert_error(upload(client, corpus(), **options), 422, "invalid_options")
        assert where in error["message"]
    assert documents(db) == [] and dispatcher.sent == []
    assert stored_files(settings.blob_dir) == []


def test_a_format_quire_cannot_read_is_refused_before_anything_is_stored(client: TestClient, db: Engine,
                                                                          settings: Settings) -> None:
    error = assert_error(upload(client, b"PK\x03\x04 a zip archive" * 100, filename="report.pdf"), 415,
                         "unsupported_format")
    assert "PDF" in error["message"]
    assert_error(upload(client, b""), 422, "empty")
    assert documents(db) == [] and stored_files(settings.blob_dir) == []


def test_images_are_sniffed_by_content_whatever_their_name(client: TestClient) -> None:
    assert upload(client, png(), filename="scan.pdf").status_code == 202


def test_a_form_without_a_file_or_not_a_form_at_all(client: TestClient) -> None:
    assert_error(client.post("/v1/documents", files={"layout": (None, b"pdf")}), 422, "missing_file")
    error = assert_error(client.post("/v1/documents", files={"document": ("a.pdf", corpus())}), 422,
                         "invalid_options")
    assert error["message"].startswith("document: not a form field")
    assert_error(client.post("/v1/documents", content=corpus(), headers={"content-type": "application/pdf"}),
                 400, "malformed_body")
    two_files = [("file", ("a.pdf", corpus())), ("file", ("b.png", png()))]
    assert_error(client.post("/v1/documents", files=two_files), 400, "malformed_body")


def test_a_body_cut_off_before_its_closing_boundary_is_not_accepted(client: TestClient, db: Engine) -> None:
    boundary = "cut"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.pdf\"\r\n\r\n".encode()
            + corpus())
    response = client.post("/v1/documents", content=body,
                           headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    assert_error(response, 400, "malformed_body")
    assert documents(db) == []


def test_a_declared_content_length_over_the_limit_is_refused_before_reading(client: TestClient,
                                                                            settings: Settings) -> None:
    response = upload(client, b"%PDF-1.7\n" + b"0" * MAX_UPLOAD_BYTES * 2)
    error = assert_error(response, 413, "file_too_large")
    assert str(MAX_UPLOAD_BYTES) in error["message"]
    assert stored_files(settings.blob_dir) == []


def stream_upload(app: FastAPI, file_chunks: Iterator[bytes]) -> httpx.Response:
    """POST a multipart body whose file part is sent chunk by chunk, without a Content-Length (httpx's ASGI
    transport hands the app each chunk as it is produced, where TestClient would read the whole body first)."""
    boundary = "streamed"

    async def body() -> AsyncIterator[bytes]:
        yield f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.pdf\"\r\n\r\n".encode()
        for chunk in file_chunks:
            yield chunk
        yield f"\r\n--{boundary}--\r\n".encode()

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
            return await http.post("/v1/documents", content=body(),
                                   headers={"content-type": f"multipart/form-data; boundary={boundary}"})

    return anyio.run(post)


def test_the_limit_is_enforced_while_the_body_streams_in(app: FastAPI, db: Engine, settings: Settings) -> None:
    """A body ten times the limit: the API stops reading soon after the limit; no blob, no temporary file."""
    chunk, pulled = b"0" * 4096, 0

    def file_chunks() -> Iterator[bytes]:
        nonlocal pulled
        yield b"%PDF-1.7\n"
        for _ in range(10 * MAX_UPLOAD_BYTES // len(chunk)):
            pulled += 1
            yield chunk

    assert_error(stream_upload(app, file_chunks()), 413, "file_too_large")
    assert pulled * len(chunk) <= MAX_UPLOAD_BYTES + len(chunk)  # read up to the limit, not to the end
    assert documents(db) == [] and stored_files(settings.blob_dir) == []


def test_a_replayed_idempotency_key_returns_the_first_document(client: TestClient, db: Engine,
                                                               dispatcher: RecordingDispatcher) -> None:
    first = upload(client, corpus(), key="order-17", layout="pdf")
    again = upload(client, corpus(), key="order-17", layout="pdf")
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json() and again.headers["location"] == first.headers["location"]
    assert len(documents(db)) == 1 and len(dispatcher.sent) == 1
    assert documents(db)[0].idempotency_key == "order-17"


def test_an_idempotency_key_reused_for_another_request_is_a_conflict(client: TestClient, db: Engine,
                                                                     settings: Settings) -> None:
    first = upload(client, corpus(), key="order-17").json()
    for other in [dict(data=png()), dict(data=corpus(), layout="page"), dict(data=corpus(), filename="other.pdf")]:
        error = assert_error(upload(client, key="order-17", **other), 409, "idempotency_conflict")
        assert first["id"] in error["message"]
    assert len(documents(db)) == 1
    assert [path.name for path in stored_files(settings.blob_dir)] == [first["sha256"]]  # the PNG was not kept


def test_idempotency_keys_belong_to_one_tenant(settings: Settings, client: TestClient, db: Engine) -> None:
    other = TestClient(create_app(open_context(settings, RecordingDispatcher()), tenant="globex"))
    assert upload(client, corpus(), key="k").status_code == 202
    assert upload(other, png(), key="k").status_code == 202
    assert sorted(document.tenant for document in documents(db)) == ["acme", "globex"]


def test_the_same_bytes_and_options_are_the_same_document(client: TestClient, db: Engine,
                                                          dispatcher: RecordingDispatcher) -> None:
    first = upload(client, corpus(), layout="pdf")
    same = upload(client, corpus(), filename="copy.pdf", layout="pdf", callback_url="https://example.com/other")
    spelled_out = upload(client, corpus(), layout="pdf", tasks="table,ocr,formula", text_layer="auto")
    assert first.status_code == 202 and (same.status_code, spelled_out.status_code) == (200, 200)
    assert first.json() == same.json() == spelled_out.json()
    different = upload(client, corpus(), layout="page")
    assert different.status_code == 202 and different.json()["id"] != first.json()["id"]
    assert different.json()["sha256"] == first.json()["sha256"]  # two documents, one blob
    assert len(documents(db)) == 2 and [stage for stage, _ in dispatcher.sent] == ["ingest", "ingest"]


def test_a_canceled_document_is_never_the_duplicate(client: TestClient, db: Engine) -> None:
    first = upload(client, corpus()).json()
    with session_scope(db) as session:  # a canceler that forgot to release the dedup key
        session.execute(update(Document).where(Document.id == first["id"]).values(status="canceled"))
    again = upload(client, corpus())
    assert again.status_code == 202 and again.json()["id"] != first["id"]
    by_id = {document.id: document for document in documents(db)}
    assert by_id[first["id"]].dedup_key is None and by_id[again.json()["id"]].dedup_key is not None


def test_a_file_larger_than_one_write_batch_arrives_whole(settings: Settings, blobs: LocalBlobStore) -> None:
    big = settings.model_copy(update={"max_upload_bytes": 3 * FLUSH_BYTES})
    chunks = [b"%PDF-1.7\n"] + [bytes([i % 256]) * 65536 for i in range(40)]  # 2.5 write batches
    body = stream_upload(create_app(open_context(big, RecordingDispatcher())), iter(chunks)).json()
    data = b"".join(chunks)
    assert body["size"] == len(data) and blobs.get(body["sha256"]) == data
