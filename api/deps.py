"""What the endpoints depend on: the service's Context, and whose documents a request may see."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials

from api.auth import bearer, tenant_for_key
from pipeline.jobs.context import Context


def app_context(request: Request) -> Context:
    """The Context the app was created with: the same settings, database, blobs and dispatcher as its workers'."""
    return request.app.state.context


def current_tenant(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> str:
    """The tenant the request acts for: its key's, or the app's one fixed tenant when keys are off. The one place
    that decides it, so every endpoint scopes its queries by the same answer."""
    if not request.app.state.require_keys:
        return request.app.state.tenant
    return tenant_for_key(app_context(request).db, credentials)


ContextDep = Annotated[Context, Depends(app_context)]
TenantId = Annotated[str, Depends(current_tenant)]
