"""Liveness that means something: the process answers and its database does too."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from api.deps import ServicesDep
from api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health)
def health(services: ServicesDep) -> Health:
    with services.db.connect() as connection:
        connection.execute(text("SELECT 1"))
    return Health(status="ok")
