"""The web page at `/`: upload a document, watch it progress, see each page with its regions beside its text.

The page is static (api/static: plain HTML, CSS and JavaScript, no build step) and talks to the public API like
any client; the one endpoint it adds is a page's Markdown rendered to sanitized HTML, which the page could not do
safely itself.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

from api.deps import ContextDep, TenantId
from api.errors import ApiError, error_responses
from api.markdown_html import markdown_html
from api.queries import owned_page
from pipeline.db.session import session_scope
from pipeline.documents.assemble import MarkdownOptions, page_markdown
from pipeline.jobs.rows import page_output, picture_links

STATIC = Path(__file__).resolve().parents[1] / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}  # what /static serves, and nothing else

router = APIRouter()


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/static/{name}", include_in_schema=False)
def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise ApiError(404, "not_found", f"no static file {name}")
    return FileResponse(STATIC / name, media_type=ASSETS[name])


@router.get("/v1/documents/{document_id}/pages/{number}/html", response_class=HTMLResponse, tags=["documents"],
            responses={200: {"content": {"text/html": {}}, "description": "An HTML fragment"},
                       **error_responses(404, 422)})
def get_page_html(ctx: ContextDep, tenant: TenantId, document_id: str, number: int) -> HTMLResponse:
    """Page `number`'s Markdown as sanitized HTML: tables kept, formulas as MathML, pictures as images of their
    crops, every other tag the recognised text holds shown as text."""
    with session_scope(ctx.db) as session:
        page = owned_page(session, tenant, document_id, number)
        pictures = picture_links(document_id, [page])
        markdown = page_markdown(page_output(page), MarkdownOptions(pictures=pictures))
    return HTMLResponse(markdown_html(markdown, frozenset(pictures.values())))
