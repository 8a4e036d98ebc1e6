"""/v1/batches: several files or one archive become one batch of documents; files that are not documents are listed
as rejected; an archive refused whole (bomb, limits, unsafe members, damage) leaves nothing behind."""

from __future__ import annotations

import tarfile
from collections.abc import AsyncIterator, Sequence

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from api.app import create_app
from api.upload import FLUSH_BYTES
from pipeline.config import Settings
from pipeline.db.models import Batch, Document
from pipeline.db.session import session_scope
from pipeline.jobs.context import open_context
from pipeline.storage import LocalBlobStore
from tests.api.conftest import MAX_UPLOAD_BYTES, RecordingDispatcher, corpus, png, stored_files, upload
from tests.api.test_documents import add_page, set_document
from tests.api.test_upload import assert_error
from tests.archives import tar_bomb, tar_of, tar_with_entry, zip_bomb, zip_of, zip_with_symlink

PDFS = ["habibi-rotated.pdf", "imagemagick-CCITTFaxDecode.pdf", "minimal-document.pdf", "pdflatex-4-pages.pdf",
        "grayscale-image.pdf"]
CALLBACK = "https://93.184.216.34/batch-done"  # a public address: no DNS lookup in the test


def five_pdfs_and_a_text_file() -> list[tuple[str, bytes]]:
    return [(f"reports/{name}", corpus(name)) for name in PDFS] + [("reports/readme.txt", b"not a document")]


def post_batch(client: TestClient, files: Sequence[tuple[str, bytes]], **options: str) -> httpx.Response:
    """POST /v1/batches with one `file` part per file, and options as form fields."""
    parts = [("file", (name, data, "application/octet-stream")) for name, data in files]
    return client.post("/v1/batches", files=parts, data=options)


def stream_batch(app: FastAPI, files: Sequence[tuple[str, bytes]], chunk_size: int) -> httpx.Response:
    """POST /v1/batches with the multipart body handed to the app chunk_size bytes at a time (httpx's ASGI
    transport passes each chunk on as it is produced, where TestClient would read the whole body first)."""
    boundary = "streamed"
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
                    .encode() + data + b"\r\n" for name, data in files) + f"--{boundary}--\r\n".encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), chunk_size):
            yield body[start:start + chunk_size]

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
            return await http.post("/v1/batches", content=chunks(),
                                   headers={"content-type": f"multipart/form-data; boundary={boundary}"})

    return anyio.run(post)


def documents(db: Engine) -> list[Document]:
    with session_scope(db) as session:
        return list(session.scalars(select(Document).order_by(Document.created_at)))


def batches(db: Engine) -> list[Batch]:
    with session_scope(db) as session:
        return list(session.scalars(select(Batch)))


def assert_nothing_kept(db: Engine, settings: Settings, dispatcher: RecordingDispatcher) -> None:
    assert documents(db) == [] and batches(db) == [] and dispatcher.sent == []
    assert stored_files(settings.blob_dir) == []


def test_a_zip_of_five_pdfs_and_a_text_file_is_five_documents_and_one_rejected_member(
        client: TestClient, db: Engine, blobs: LocalBlobStore, dispatcher: RecordingDispatcher) -> None:
    response = post_batch(client, [("scans.zip", zip_of(five_pdfs_and_a_text_file()))], dpi="150",
                          callback_url=CALLBACK)
    assert response.status_code == 202, response.text
    body = response.json()
    assert response.headers["location"] == body["status_url"] == f"http://testserver/v1/batches/{body['id']}"
    assert [item["name"] for item in body["documents"]] == [f"reports/{name}" for name in PDFS]
    assert body["rejected"] == [{"name": "reports/readme.txt", "code": "unsupported_format",
                                 "message": "the file is not a PDF, TIFF, PNG, JPEG or WebP image"}]
    rows = documents(db)
    assert [row.id for row in rows] == [item["id"] for item in body["documents"]]
    assert {(row.batch_id, row.tenant, row.status) for row in rows} == {(body["id"], "acme", "queued")}
    assert [blobs.get(row.sha256) for row in rows] == [corpus(name) for name in PDFS]
    assert {row.options["dpi"] for row in rows} == {150}  # the options apply to every document…
    assert {row.options["callback_url"] for row in rows} == {None}  # …but the callback is the batch's alone
    [batch] = batches(db)
    assert (batch.callback_url, batch.document_count, batch.options["dpi"]) == (CALLBACK, 5, 150)
    assert dispatcher.sent == [("ingest", row.id) for row in rows]


def test_several_files_are_a_batch_too_and_what_is_not_a_document_is_listed(
        client: TestClient, db: Engine, dispatcher: RecordingDispatcher) -> None:
    response = post_batch(client, [("a.pdf", corpus(PDFS[0])), ("notes.txt", b"text"), ("b.png", png()),
                                   ("empty.pdf", b""), ("dir\\c.pdf", corpus(PDFS[1]))])
    assert response.status_code == 202, response.text
    body = response.json()
    assert [item["name"] for item in body["documents"]] == ["a.pdf", "b.png", "c.pdf"]
    assert [(item["name"], item["code"]) for item in body["rejected"]] == [("notes.txt", "unsupported_format"),
                                                                          ("empty.pdf", "empty")]
    assert len(documents(db)) == 3 and len(dispatcher.sent) == 3


def test_files_streamed_in_small_chunks_arrive_whole(settings: Settings, db: Engine, blobs: LocalBlobStore) -> None:
    """Parts end and begin inside chunks, and one file is larger than a write batch."""
    large = b"%PDF-1.7\n" + bytes(range(256)) * (5 * FLUSH_BYTES // 512)
    files = [("large.pdf", large), ("notes.txt", b"t" * 5000), ("small.png", png()), ("a.pdf", corpus(PDFS[0]))]
    roomy = settings.model_copy(update={"max_upload_bytes": 3 * FLUSH_BYTES})
    app = create_app(open_context(roomy, RecordingDispatcher()), tenant="acme")
    response = stream_batch(app, files, chunk_size=7000)
    assert response.status_code == 202, response.text
    assert [item["name"] for item in response.json()["rejected"]] == ["notes.txt"]
    assert [(row.filename, blobs.get(row.sha256)) for row in documents(db)] == [files[0], *files[2:]]


@pytest.mark.parametrize("compression", ["", "gz", "bz2", "xz"])
def test_a_tar_plain_or_compressed_works(client: TestClient, db: Engine, compression: str) -> None:
    response = post_batch(client, [("scans.tar", tar_of(five_pdfs_and_a_text_file(), compression))])
    assert response.status_code == 202, response.text
    assert len(response.json()["documents"]) == 5 and len(response.json()["rejected"]) == 1
    assert len(documents(db)) == 5


def test_members_too_large_encrypted_or_archived_again_are_rejected_alone(client: TestClient, db: Engine) -> None:
    big = b"%PDF-1.4\n" + bytes(MAX_UPLOAD_BYTES)
    inner = zip_of([("x.pdf", corpus(PDFS[0]))])
    response = post_batch(client, [("a.zip", zip_of([("big.pdf", big), ("inner.zip", inner),
                                                      ("ok.pdf", corpus(PDFS[0]))]))])
    assert response.status_code == 202, response.text
    rejected = {item["name"]: item["code"] for item in response.json()["rejected"]}
    assert rejected == {"big.pdf": "file_too_large", "inner.zip": "unsupported_format"}
    assert [row.filename for row in documents(db)] == ["ok.pdf"]


def test_identical_members_are_one_document_and_a_batch_repeats_no_document_outside_it(
        client: TestClient, db: Engine) -> None:
    outside = upload(client, corpus(PDFS[0])).json()["id"]
    response = post_batch(client, [("a.zip", zip_of([("one.pdf", corpus(PDFS[0])), ("two.pdf", corpus(PDFS[0]))]))])
    assert response.status_code == 202, response.text
    first, second = response.json()["documents"]
    assert first["id"] == second["id"] != outside
    assert batches(db)[0].document_count == 1
    assert client.get(response.json()["status_url"]).json()["progress"]["documents"] == {"done": 0, "total": 1}


def test_a_zip_bomb_is_refused_whole_and_nothing_is_kept(client: TestClient, db: Engine, settings: Settings,
                                                         dispatcher: RecordingDispatcher) -> None:
    assert_error(post_batch(client, [("scans.zip", zip_bomb(32 << 20))]), 422, "archive_bomb")
    assert_nothing_kept(db, settings, dispatcher)


def test_a_tar_bomb_is_refused_while_it_decompresses_and_what_was_staged_is_thrown_away(
        client: TestClient, db: Engine, settings: Settings, dispatcher: RecordingDispatcher) -> None:
    bomb = tar_bomb(32 << 20, "gz", before=[("a.pdf", corpus(PDFS[0]))])  # a.pdf is staged before the bomb
    assert_error(post_batch(client, [("scans.tar.gz", bomb)]), 422, "archive_bomb")
    assert_nothing_kept(db, settings, dispatcher)


@pytest.mark.parametrize(("archive", "code"), [
    (zip_of([("ok.pdf", corpus(PDFS[0])), ("../evil.pdf", corpus(PDFS[1]))]), "unsafe_member_name"),
    (tar_of([("ok.pdf", corpus(PDFS[0])), ("../evil.pdf", corpus(PDFS[1]))], "gz"), "unsafe_member_name"),
    (zip_of([("/etc/evil.pdf", corpus(PDFS[0]))]), "unsafe_member_name"),
    (zip_with_symlink("passwd.pdf", "/etc/passwd", [("ok.pdf", corpus(PDFS[0]))]), "unsafe_member_type"),
    (tar_of([("ok.pdf", corpus(PDFS[0])), ("cut.pdf", corpus(PDFS[1]))], "gz")[:-100], "corrupt_archive"),
], ids=["zip-dotdot", "tar-dotdot", "absolute", "symlink", "corrupt"])
def test_an_archive_with_an_unsafe_member_is_refused_whole(
        client: TestClient, db: Engine, settings: Settings, dispatcher: RecordingDispatcher,
        archive: bytes, code: str) -> None:
    assert_error(post_batch(client, [("scans", archive)]), 422, code)
    assert_nothing_kept(db, settings, dispatcher)


def test_a_tar_symlink_is_refused_whole(client: TestClient, db: Engine, settings: Settings,
                                        dispatcher: RecordingDispatcher) -> None:
    link = tarfile.TarInfo("passwd.pdf")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    assert_error(post_batch(client, [("a.tar", tar_with_entry(link, [("ok.pdf", corpus(PDFS[0]))]))]), 422,
                 "unsafe_member_type")
    assert_nothing_kept(db, settings, dispatcher)


def test_too_many_members_or_files_are_refused(settings: Settings, db: Engine,
                                               dispatcher: RecordingDispatcher) -> None:
    few = settings.model_copy(update={"max_archive_members": 3})
    with TestClient(create_app(open_context(few, dispatcher), tenant="acme")) as client:
        four = [(f"{i}.pdf", corpus(PDFS[i])) for i in range(4)]
        assert_error(post_batch(client, [("a.zip", zip_of(four))]), 422, "archive_too_many_members")
        assert_error(post_batch(client, four), 422, "archive_too_many_members")
        assert post_batch(client, four[:3]).status_code == 202
    assert len(documents(db)) == 3


def test_an_archive_must_come_alone_and_a_batch_needs_a_document(
        client: TestClient, db: Engine, settings: Settings, dispatcher: RecordingDispatcher) -> None:
    archive = zip_of([("a.pdf", corpus(PDFS[0]))])
    assert_error(post_batch(client, [("a.zip", archive), ("b.pdf", corpus(PDFS[1]))]), 422, "invalid_batch")
    assert_error(post_batch(client, [("b.pdf", corpus(PDFS[1])), ("a.zip", archive)]), 422, "invalid_batch")
    error = assert_error(post_batch(client, [("a.txt", b"text"), ("b.txt", b"more")]), 422, "no_documents")
    assert "a.txt: unsupported_format" in error["message"]
    assert_error(post_batch(client, [("a.zip", zip_of([("a.txt", b"text")]))]), 422, "no_documents")
    assert_error(client.post("/v1/batches", files={"dpi": (None, "150")}), 422, "missing_file")
    assert_error(post_batch(client, [("a.pdf", corpus(PDFS[0]))], dpi="9000"), 422, "invalid_options")
    assert_error(post_batch(client, [("a.pdf", corpus(PDFS[0]))], callback_url="http://127.0.0.1/hook"), 422,
                 "callback_url_refused")
    assert_error(post_batch(client, [("big.pdf", b"%PDF-1.4\n" + bytes(MAX_UPLOAD_BYTES))]), 413, "file_too_large")
    assert_nothing_kept(db, settings, dispatcher)


def test_status_counts_documents_by_status_and_sums_their_progress(client: TestClient, db: Engine) -> None:
    body = post_batch(client, [("a.zip", zip_of([("a.pdf", corpus(PDFS[0])), ("b.pdf", corpus(PDFS[1])),
                                                  ("c.txt", b"text")]))]).json()
    first, second = (item["id"] for item in body["documents"])
    status = client.get(body["status_url"]).json()
    assert status["done"] is False and status["finished_at"] is None
    assert status["statuses"] == {"queued": 2, "processing": 0, "succeeded": 0, "partial": 0, "failed": 0,
                                  "canceled": 0}
    assert status["progress"] == {"documents": {"done": 0, "total": 2}, "pages": {"done": 0, "total": None},
                                  "regions": {"done": 0, "total": 0}}
    assert [item["code"] for item in status["rejected"]] == ["unsupported_format"]

    set_document(db, first, status="processing", page_count=2, pages_done=1)
    add_page(db, first, 0, regions=("succeeded", "succeeded"))
    add_page(db, first, 1, status="processing", regions=("pending",))
    set_document(db, second, status="failed", error_code="encrypted", error_message="locked")
    status = client.get(body["status_url"]).json()
    assert status["statuses"]["processing"] == 1 and status["statuses"]["failed"] == 1
    assert status["progress"] == {"documents": {"done": 1, "total": 2}, "pages": {"done": 1, "total": 2},
                                  "regions": {"done": 2, "total": 3}}
    assert [(item["filename"], item["status"]) for item in status["documents"]] == [("a.pdf", "processing"),
                                                                                   ("b.pdf", "failed")]
    assert status["documents"][1]["error"] == {"code": "encrypted", "message": "locked"}

    set_document(db, first, status="succeeded", pages_done=2)
    assert client.get(body["status_url"]).json()["done"] is True


def test_batches_are_the_tenant_s_own_and_listed_newest_first(client: TestClient, settings: Settings) -> None:
    ids = [post_batch(client, [(f"{i}.pdf", corpus(PDFS[i]))]).json()["id"] for i in range(3)]
    first = client.get("/v1/batches", params={"limit": 2}).json()
    assert [item["id"] for item in first["items"]] == ids[:0:-1]
    rest = client.get("/v1/batches", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [item["id"] for item in rest["items"]] == ids[:1] and rest["next_cursor"] is None
    assert first["items"][0]["document_count"] == 1 and first["items"][0]["rejected_count"] == 0

    other = TestClient(create_app(open_context(settings, RecordingDispatcher()), tenant="globex"))
    assert_error(other.get(f"/v1/batches/{ids[0]}"), 404, "batch_not_found")
    assert other.get("/v1/batches").json()["items"] == []
    assert_error(client.get("/v1/batches/no-such-id"), 404, "batch_not_found")
    assert_error(client.get("/v1/batches", params={"cursor": "nonsense"}), 400, "invalid_cursor")


def test_openapi_describes_the_batch_upload(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert sorted(spec["paths"]["/v1/batches"]) == ["get", "post"] and "/v1/batches/{batch_id}" in spec["paths"]
    post = spec["paths"]["/v1/batches"]["post"]
    form = post["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file"] and form["properties"]["file"]["items"]["format"] == "binary"
    assert set(form["properties"]) == {"file", "layout", "dpi", "tasks", "text_layer", "password", "callback_url"}
    assert {"202", "413", "422"} <= set(post["responses"])
