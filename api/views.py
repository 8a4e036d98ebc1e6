"""Database rows as response bodies; URLs come from the request, so they name the host the client used."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.orm import Session

from api.errors import ErrorDetail
from api.schemas import DocumentAccepted, DocumentLinks, DocumentStatus, DocumentSummary, PageResult
from pipeline.db.models import Document, Page
from pipeline.documents.assemble import MarkdownOptions, page_json
from pipeline.jobs.rows import page_output, picture_links
from pipeline.jobs.summaries import document_summary


def document_url(request: Request, document_id: str) -> str:
    return str(request.url_for("get_document", document_id=document_id))


def document_accepted_view(request: Request, document: Document) -> DocumentAccepted:
    return DocumentAccepted(id=document.id, status=document.status, filename=document.filename,  # type: ignore[arg-type]
                            size=document.size_bytes, sha256=document.sha256, created_at=document.created_at,
                            status_url=document_url(request, document.id))


def document_status_view(request: Request, session: Session, document: Document) -> DocumentStatus:
    """The document's summary (what its webhook events carry too) with the links a client follows from here."""
    result = request.url_for("get_result", document_id=document.id)
    links = DocumentLinks(self=document_url(request, document.id),
                          result_json=str(result.include_query_params(format="json")),
                          result_markdown=str(result.include_query_params(format="markdown")))
    return DocumentStatus(**document_summary(session, document), links=links)


def document_summary_view(request: Request, document: Document) -> DocumentSummary:
    return DocumentSummary(id=document.id, filename=document.filename, status=document.status,  # type: ignore[arg-type]
                           media_type=document.media_type, size=document.size_bytes, page_count=document.page_count,
                           error=_problem(document), created_at=document.created_at,
                           finished_at=document.finished_at, status_url=document_url(request, document.id))


def page_view(request: Request, page: Page) -> PageResult:
    """The page as result.schema.json has it, with `status` the page's live one: page_output reads every page
    that has not failed as succeeded, which is right for a finished document and wrong for a queued page. Its
    Markdown links pictures as the document's does."""
    number = page.index + 1
    image = request.url_for("get_page_image", document_id=page.document_id, number=number)
    pictures = MarkdownOptions(pictures=picture_links(page.document_id, [page]))
    body = page_json(page_output(page), pictures) | {"status": page.status, "number": number, "image_url": str(image)}
    return PageResult.model_validate(body)


def _problem(document: Document) -> ErrorDetail | None:
    if document.error_code is None:
        return None
    return ErrorDetail(code=document.error_code, message=document.error_message or document.error_code)
