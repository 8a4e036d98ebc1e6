"""/v1/documents/{id}/deliveries: every webhook attempt made (or scheduled) for a document's events."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from api.deps import ContextDep, TenantId
from api.errors import error_responses
from api.queries import owned_document
from api.schemas import DeliveryAttempt, DeliveryList
from pipeline.db.models import WebhookDelivery
from pipeline.db.session import session_scope

router = APIRouter(prefix="/v1/documents", tags=["webhooks"])


@router.get("/{document_id}/deliveries", response_model=DeliveryList, responses=error_responses(404, 422))
def list_deliveries(ctx: ContextDep, tenant: TenantId, document_id: str) -> DeliveryList:
    """The document's webhook delivery attempts, newest first; a failed one says why and when the retry is due."""
    with session_scope(ctx.db) as session:
        owned_document(session, tenant, document_id)
        rows = session.scalars(select(WebhookDelivery).where(WebhookDelivery.document_id == document_id)
                               .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc()))
        return DeliveryList(items=[DeliveryAttempt.model_validate(row, from_attributes=True) for row in rows])
