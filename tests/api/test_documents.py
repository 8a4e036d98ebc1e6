"""Reading and deleting documents: status and progress, results, pages, listing, deletion, tenant isolation."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy import Engine, func, select, update

from api.app import create_app
from pipeline.config import Settings
from pipeline.db.models import Document, Page, Region
from pipeline.db.session import session_scope
from pipeline.documents.assemble import page_json
from pipeline.jobs.context import open_context
from pipeline.jobs.rows import page_output
from pipeline.storage import LocalBlobStore
from tests.api.conftest import RecordingDispatcher, corpus, png, stored_files, upload
from tests.api.test_upload import assert_error


def add_page(db: Engine, document_id: str, index: int, status: str = "succeeded", image_key: str | None = None,
             regions: tuple[str, ...] = (), layout: str = "pdf", layout_reason: str | None = None) -> None:
    """A page row as prepare would leave it, with one text region per entry of `regions` (its status)."""
    with session_scope(db) as session:
        page = Page(document_id=document_id, index=index, status=status, width_px=80, height_px=100,
                    width_pt=57.6, height_pt=72.0, dpi=100.0, image_key=image_key, layout=layout,
                    layout_reason=layout_reason)
        session.add(page)
        session.flush()
        for order, region_status in enumerate(regions):
            done, box = region_status != "pending", [0, 10 * order, 80, 10 * order + 9]
            session.add(Region(page_id=page.id, index=order, reading_order=order, label="text", score=0.9,
                               bbox_px=box, bbox_pt=[value * 0.72 for value in box],
                               task="ocr", status=region_status, source="model" if done else None,
                               text=f"Line {order}." if done else None))


def set_document(db: Engine, document_id: str, **values: object) -> None:
    with session_scope(db) as session:
        session.execute(update(Document).where(Document.id == document_id).values(**values))


def test_status_shows_progress_over_pages_and_regions(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus(), password="secret").json()["id"]
    queued = client.get(f"/v1/documents/{document_id}").json()
    assert queued["progress"] == {"pages": {"done": 0, "total": None}, "regions": {"done": 0, "total": 0}}
    assert queued["error"] is None and queued["page_count"] is None and queued["started_at"] is None
    assert "password" not in queued["options"]
    started = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    set_document(db, document_id, status="processing", page_count=4, pages_done=1, media_type="application/pdf",
                 started_at=started, timings={"ingest": 12.5})
    add_page(db, document_id, 0, regions=("succeeded", "failed"))
    add_page(db, document_id, 1, status="processing", regions=("succeeded", "pending", "pending"))
    body = client.get(f"/v1/documents/{document_id}").json()
    assert body["progress"] == {"pages": {"done": 1, "total": 4}, "regions": {"done": 3, "total": 5}}
    assert (body["status"], body["media_type"], body["page_count"]) == ("processing", "application/pdf", 4)
    assert body["timings_ms"] == {"ingest": 12.5} and body["started_at"] == "2025-01-02T03:04:05Z"
    assert body["links"] == {
        "self": f"http://testserver/v1/documents/{document_id}",
        "result_json": f"http://testserver/v1/documents/{document_id}/result?format=json",
        "result_markdown": f"http://testserver/v1/documents/{document_id}/result?format=markdown"}
    assert set(body) == {"id", "filename", "status", "media_type", "size", "sha256", "page_count", "options",
                         "progress", "error", "timings_ms", "created_at", "started_at", "finished_at", "links"}


def test_a_failed_document_says_why(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus()).json()["id"]
    set_document(db, document_id, status="failed", error_code="encrypted", error_message="needs a password")
    body = client.get(f"/v1/documents/{document_id}").json()
    assert body["error"] == {"code": "encrypted", "message": "needs a password"}


def test_the_result_is_not_ready_until_the_document_has_finished(client: TestClient, db: Engine,
                                                                 blobs: LocalBlobStore) -> None:
    document_id = upload(client, corpus()).json()["id"]
    for status in ("queued", "processing", "canceled"):
        set_document(db, document_id, status=status)
        error = assert_error(client.get(f"/v1/documents/{document_id}/result"), 409, "not_ready")
        assert status in error["message"]
    result, markdown = b'{"version": 1, "pages": []}', "# Title\n\nÜber alles\n".encode()
    set_document(db, document_id, status="partial", result_key=blobs.put(result), markdown_key=blobs.put(markdown))
    as_json = client.get(f"/v1/documents/{document_id}/result")
    assert as_json.status_code == 200 and as_json.content == result
    assert as_json.headers["content-type"] == "application/json"
    assert as_json.headers["etag"] == f'"{blobs.put(result)}"'
    as_markdown = client.get(f"/v1/documents/{document_id}/result", params={"format": "markdown"})
    assert as_markdown.content == markdown and as_markdown.text == "# Title\n\nÜber alles\n"
    assert as_markdown.headers["content-type"] == "text/markdown; charset=utf-8"
    assert_error(client.get(f"/v1/documents/{document_id}/result", params={"format": "pdf"}), 422, "invalid_request")


def test_a_page_is_its_result_json_with_its_live_status(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus()).json()["id"]
    add_page(db, document_id, 0, regions=("succeeded", "succeeded"))
    add_page(db, document_id, 1, status="processing", regions=("succeeded", "pending"))
    first = client.get(f"/v1/documents/{document_id}/pages/1").json()
    with session_scope(db) as session:
        row = session.scalars(select(Page).where(Page.document_id == document_id, Page.index == 0)).one()
        expected = page_json(page_output(row), None)
    image_url = f"http://testserver/v1/documents/{document_id}/pages/1/image"
    assert first == expected | {"number": 1, "image_url": image_url}
    assert first["markdown"] == "Line 0.\n\nLine 1." and [r["text"] for r in first["regions"]] == ["Line 0.", "Line 1."]
    second = client.get(f"/v1/documents/{document_id}/pages/2").json()
    assert (second["number"], second["index"], second["status"]) == (2, 1, "processing")
    for number in (0, 3, -1):
        error = assert_error(client.get(f"/v1/documents/{document_id}/pages/{number}"), 404, "page_not_found")
        assert "count from 1" in error["message"]


def test_a_page_says_which_layout_laid_it_out_and_why(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus()).json()["id"]
    add_page(db, document_id, 0, layout="page", layout_reason="no layout weights, no text layer")
    add_page(db, document_id, 1)
    pages = [client.get(f"/v1/documents/{document_id}/pages/{number}").json() for number in (1, 2)]
    assert [(page["layout"], page["layout_reason"]) for page in pages] == [
        ("page", "no layout weights, no text layer"), ("pdf", None)]


def test_a_page_image_is_served_once_the_page_is_rendered(client: TestClient, db: Engine,
                                                          blobs: LocalBlobStore) -> None:
    document_id = upload(client, corpus()).json()["id"]
    add_page(db, document_id, 0, status="queued")
    assert_error(client.get(f"/v1/documents/{document_id}/pages/1/image"), 404, "page_image_not_ready")
    image = png(80, 100, "navy")
    with session_scope(db) as session:
        session.execute(update(Page).where(Page.document_id == document_id).values(image_key=blobs.put(image)))
    response = client.get(f"/v1/documents/{document_id}/pages/1/image")
    assert response.status_code == 200 and response.content == image
    assert response.headers["content-type"] == "image/png" and response.headers["content-length"] == str(len(image))
    assert_error(client.get(f"/v1/documents/{document_id}/pages/2/image"), 404, "page_not_found")


def test_a_regions_crop_is_cut_from_the_page_image_at_its_crop_box(client: TestClient, db: Engine,
                                                                   blobs: LocalBlobStore) -> None:
    document_id = upload(client, corpus()).json()["id"]
    page = Image.radial_gradient("L").resize((80, 100)).convert("RGB")
    image = io.BytesIO()
    page.save(image, "PNG")
    add_page(db, document_id, 0, image_key=blobs.put(image.getvalue()), regions=("succeeded", "succeeded"))
    with session_scope(db) as session:
        session.execute(update(Region).where(Region.index == 1).values(crop_px=[4, 8, 40, 30]))
    response = client.get(f"/v1/documents/{document_id}/pages/1/regions/1/image")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(response.content)).tobytes() == page.crop((4, 8, 40, 30)).tobytes()
    assert_error(client.get(f"/v1/documents/{document_id}/pages/1/regions/0/image"), 404, "region_image_not_found")
    assert_error(client.get(f"/v1/documents/{document_id}/pages/1/regions/2/image"), 404, "region_not_found")
    assert_error(client.get(f"/v1/documents/{document_id}/pages/2/regions/1/image"), 404, "page_not_found")


def test_the_listing_is_newest_first_in_pages_that_follow_a_cursor(client: TestClient, db: Engine) -> None:
    ids = [upload(client, png(8, 8 + i)).json()["id"] for i in range(5)]
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for i, document_id in enumerate(ids):  # two share a timestamp: the id breaks the tie
        set_document(db, document_id, created_at=start + timedelta(seconds=min(i, 3)))
    seen, cursor, pages = [], None, 0
    while True:
        body = client.get("/v1/documents", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += [item["id"] for item in body["items"]]
        pages, cursor = pages + 1, body["next_cursor"]
        if cursor is None:
            break
    tied = sorted(ids[3:], reverse=True)
    assert seen == tied + [ids[2], ids[1], ids[0]] and pages == 3
    item = client.get("/v1/documents", params={"limit": 1}).json()["items"][0]
    assert item["status_url"] == f"http://testserver/v1/documents/{item['id']}" and item["status"] == "queued"


def test_the_listing_filters_by_status_and_checks_its_parameters(client: TestClient, db: Engine) -> None:
    ids = [upload(client, png(8, 8 + i)).json()["id"] for i in range(3)]
    set_document(db, ids[1], status="failed", error_code="corrupt", error_message="broken xref")
    failed = client.get("/v1/documents", params={"status": "failed"}).json()
    assert [item["id"] for item in failed["items"]] == [ids[1]] and failed["next_cursor"] is None
    assert failed["items"][0]["error"] == {"code": "corrupt", "message": "broken xref"}
    assert len(client.get("/v1/documents").json()["items"]) == 3
    for params in ({"limit": 0}, {"limit": 201}, {"status": "lost"}):
        assert_error(client.get("/v1/documents", params=params), 422, "invalid_request")
    assert_error(client.get("/v1/documents", params={"cursor": "not-a-cursor"}), 400, "invalid_cursor")


def test_delete_removes_rows_and_the_blobs_no_other_document_uses(client: TestClient, db: Engine,
                                                                  blobs: LocalBlobStore, settings: Settings) -> None:
    first = upload(client, corpus(), layout="pdf").json()
    second = upload(client, corpus(), layout="page").json()  # the same upload blob, another document
    shared_image, own_image = blobs.put(png(80, 100, "gray")), blobs.put(png(80, 100, "red"))
    add_page(db, first["id"], 0, image_key=shared_image, regions=("succeeded",))
    add_page(db, first["id"], 1, image_key=own_image, regions=("succeeded",))
    add_page(db, second["id"], 0, image_key=shared_image)
    results = {"result_key": blobs.put(b'{"pages": []}'), "markdown_key": blobs.put(b"# first")}
    set_document(db, first["id"], status="succeeded", **results)

    response = client.delete(f"/v1/documents/{first['id']}")
    assert response.status_code == 204 and response.content == b""
    assert_error(client.get(f"/v1/documents/{first['id']}"), 404, "document_not_found")
    assert_error(client.delete(f"/v1/documents/{first['id']}"), 404, "document_not_found")
    with session_scope(db) as session:
        assert session.scalar(select(func.count(Page.id))) == 1  # the second document's page
        assert session.scalar(select(func.count(Region.id))) == 0  # the first's regions went with its pages
    assert blobs.exists(first["sha256"]) and blobs.exists(shared_image)
    assert not any(blobs.exists(key) for key in (own_image, *results.values()))

    assert client.delete(f"/v1/documents/{second['id']}").status_code == 204
    assert stored_files(settings.blob_dir) == []


def test_unknown_ids_and_other_tenants_documents_are_not_found(client: TestClient, settings: Settings) -> None:
    document_id = upload(client, corpus()).json()["id"]
    other = TestClient(create_app(open_context(settings, RecordingDispatcher()), tenant="globex"))
    for http, id_ in ((client, "no-such-id"), (other, document_id)):
        for path in ("", "/result", "/pages/1", "/pages/1/image", "/pages/1/regions/0/image"):
            error = assert_error(http.get(f"/v1/documents/{id_}{path}"), 404, "document_not_found")
            assert id_ in error["message"]
        assert_error(http.delete(f"/v1/documents/{id_}"), 404, "document_not_found")
    assert other.get("/v1/documents").json()["items"] == []
    assert client.get(f"/v1/documents/{document_id}").status_code == 200  # globex's delete did nothing


def test_cancel_ends_an_unfinished_document_and_refuses_a_finished_one(client: TestClient, db: Engine) -> None:
    queued = upload(client, corpus()).json()["id"]
    response = client.post(f"/v1/documents/{queued}/cancel")
    assert (response.status_code, response.json()["status"]) == (200, "canceled")
    assert client.post(f"/v1/documents/{queued}/cancel").status_code == 200  # again: still canceled
    finished = upload(client, png()).json()["id"]
    set_document(db, finished, status="succeeded")
    assert_error(client.post(f"/v1/documents/{finished}/cancel"), 409, "not_cancelable")
    assert_error(client.post("/v1/documents/no-such-id/cancel"), 404, "document_not_found")
