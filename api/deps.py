"""What the endpoints depend on: the service's parts, and whose documents a request may see."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy import Engine

from api.auth import bearer, tenant_for_key
from pipeline.config import Settings
from pipeline.jobs.dispatch import Dispatcher
from pipeline.storage import BlobStore


@dataclass(frozen=True)
class Services:
    settings: Settings
    db: Engine
    blobs: BlobStore
    dispatcher: Dispatcher


def services(request: Request) -> Services:
    return request.app.state.services


def current_tenant(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> str:
    """The tenant the request acts for: its key's, or the app's one fixed tenant when keys are off. The one place
    that decides it, so every endpoint scopes its queries by the same answer."""
    if not request.app.state.require_keys:
        return request.app.state.tenant
    return tenant_for_key(services(request).db, credentials)


ServicesDep = Annotated[Services, Depends(services)]
Tenant = Annotated[str, Depends(current_tenant)]
