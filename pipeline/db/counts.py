"""Counts over a document's rows that the API's status view and the webhook's event body must report alike."""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from pipeline.db.models import Page, Region


def region_counts(session: Session, document_id: str) -> tuple[int, int]:
    """(regions no longer pending, regions so far) over the document's pages."""
    done = func.coalesce(func.sum(case((Region.status != "pending", 1), else_=0)), 0)
    row = session.execute(select(done, func.count(Region.id)).join(Page, Region.page_id == Page.id)
                          .where(Page.document_id == document_id)).one()
    return int(row[0]), int(row[1])
