"""The database reads behind the endpoints, each scoped to the tenant: another tenant's id reads as unknown."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session, selectinload

from api.errors import ApiError
from pipeline.db.models import Batch, Document, Page

Listed = TypeVar("Listed", Document, Batch)


def owned_document(session: Session, tenant: str, document_id: str) -> Document:
    """The tenant's document; 404 `document_not_found` for an unknown id and for another tenant's alike."""
    document = session.scalars(select(Document).where(Document.id == document_id,
                                                      Document.tenant == tenant)).one_or_none()
    if document is None:
        raise ApiError(404, "document_not_found", f"no document {document_id}")
    return document


def owned_page(session: Session, tenant: str, document_id: str, number: int) -> Page:
    """Page `number` (1-based) of the tenant's document, with its regions; 404 `page_not_found` past the end."""
    owned_document(session, tenant, document_id)
    page = session.scalars(select(Page).where(Page.document_id == document_id, Page.index == number - 1)
                           .options(selectinload(Page.regions))).one_or_none()
    if page is None:
        raise ApiError(404, "page_not_found", f"document {document_id} has no page {number} (pages count from 1)")
    return page


def newest_documents(session: Session, tenant: str, status: str | None, limit: int,
                     cursor: str | None) -> tuple[list[Document], str | None]:
    """One page of the tenant's documents (those with `status`, when given) as newest_first reads it."""
    query = select(Document).where(Document.tenant == tenant)
    if status is not None:
        query = query.where(Document.status == status)
    return newest_first(session, query, Document, limit, cursor)


def newest_first(session: Session, query: Select[Listed], model: type[Listed], limit: int,
                 cursor: str | None) -> tuple[list[Listed], str | None]:
    """One page of the query's rows, newest first, and the cursor for the next page (None on the last).

    Keyset pagination on (created_at, id): a page is the same however many rows arrive meanwhile, and reading
    page n costs the same as page 1.
    """
    if cursor is not None:
        created_at, last_id = decode_cursor(cursor)
        query = query.where(or_(model.created_at < created_at,
                                and_(model.created_at == created_at, model.id < last_id)))
    rows = list(session.scalars(query.order_by(model.created_at.desc(), model.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]) if more else None


def encode_cursor(row: Document | Batch) -> str:
    raw = json.dumps([row.created_at.isoformat(), row.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor holds; 400 `invalid_cursor` for anything encode_cursor did not make."""
    try:
        created_at, row_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        moment = datetime.fromisoformat(created_at)
        if moment.tzinfo is None or not isinstance(row_id, str):
            raise ValueError(cursor)
        return moment, row_id
    except (ValueError, TypeError, binascii.Error):
        raise ApiError(400, "invalid_cursor", "the cursor is not one this API returned") from None
