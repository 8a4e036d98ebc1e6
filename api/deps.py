"""What the endpoints depend on: the service's parts, and whose documents a request may see."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine

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


def current_tenant(request: Request) -> str:
    """The tenant the request acts for. One fixed tenant per app until API keys arrive; this is the one place
    that will then read the key, so every endpoint already scopes its queries by it."""
    return request.app.state.tenant


ServicesDep = Annotated[Services, Depends(services)]
Tenant = Annotated[str, Depends(current_tenant)]
