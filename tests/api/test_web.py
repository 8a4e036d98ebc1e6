"""The web page's routes: the page and its two assets at fixed paths, and a page's Markdown as sanitized HTML
(the renderer's own rules are specified in tests/web/test_markdown_html.py; the browser test drives the page)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from pipeline.db.models import Page, Region
from pipeline.db.session import session_scope
from tests.api.conftest import corpus, upload
from tests.api.test_upload import assert_error


def add_recognised_page(db: Engine, document_id: str) -> None:
    """Page 1 as the workers leave it: a title, a table and a formula, with a script hidden in the title."""
    results = [("doc_title", "ocr", {"text": "Results <script>alert(1)</script>"}),
               ("table", "table", {"html": "<table><tr><td onclick=\"x()\">42</td></tr></table>"}),
               ("display_formula", "formula", {"latex": "E = mc^2"})]
    with session_scope(db) as session:
        page = Page(document_id=document_id, index=0, status="succeeded", width_px=80, height_px=100,
                    width_pt=57.6, height_pt=72.0, dpi=100.0, layout="pdf")
        session.add(page)
        session.flush()
        for order, (label, task, result) in enumerate(results):
            box = [0, 30 * order, 80, 30 * order + 20]
            session.add(Region(page_id=page.id, index=order, reading_order=order, label=label, score=0.9,
                               bbox_px=box, bbox_pt=box, task=task, status="succeeded", source="model", **result))


def test_the_page_and_its_assets_are_served(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/app.js"' in page.text and '<input type="file"' in page.text
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/app.css").headers["content-type"].startswith("text/css")
    for name in ("index.html", "..%2Fapp.py", "nothing.js"):
        assert_error(client.get(f"/static/{name}"), 404, "not_found")


def test_a_pages_markdown_comes_as_sanitized_html(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus()).json()["id"]
    add_recognised_page(db, document_id)
    response = client.get(f"/v1/documents/{document_id}/pages/1/html")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert response.text.startswith("<h1>Results &lt;script&gt;alert(1)&lt;/script&gt;</h1>")
    assert "<table><tbody><tr><td>42</td></tr></tbody></table>" in response.text
    assert '<div class="math block">' in response.text and "<msup><mi>c</mi><mn>2</mn></msup>" in response.text
    assert_error(client.get(f"/v1/documents/{document_id}/pages/2/html"), 404, "page_not_found")
    assert_error(client.get("/v1/documents/nope/pages/1/html"), 404, "document_not_found")
