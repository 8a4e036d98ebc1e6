"""The HTTP service: the FastAPI app over the database, the blob store and a dispatcher that starts the workers.

The app owns nothing global: `create_app` gets its settings and dispatcher, so the embedded mode (in-process
workers), the distributed mode (Celery) and the tests each build one with their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.auth import KEYLESS_TENANT
from api.deps import Services
from api.errors import error_responses, install_error_handlers
from api.metrics import install_metrics
from api.routes import batches, deliveries, documents, health, web
from pipeline.config import Settings
from pipeline.db.session import create_db_engine
from pipeline.jobs.dispatch import Dispatcher
from pipeline.storage import LocalBlobStore

DESCRIPTION = """Quire turns scanned and born-digital documents into Markdown and JSON.

Upload with `POST /v1/documents`, poll `GET /v1/documents/{id}`, then fetch `GET /v1/documents/{id}/result`.
Errors are `{"error": {"code", "message"}}`; branch on `code`, which is stable."""


def create_app(settings: Settings, dispatcher: Dispatcher, require_keys: bool = False,
               tenant: str = KEYLESS_TENANT) -> FastAPI:
    """The API; each request acts for its API key's tenant, or for `tenant` when keys are not required (see
    `api.auth.keys_required`). The schema must already be migrated (`quire migrate`)."""
    assert settings.blob_dir is not None  # Settings fills it in
    db = create_db_engine(settings.database_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        db.dispose()

    app = FastAPI(title="Quire", version="1", description=DESCRIPTION, lifespan=lifespan)
    app.state.services = Services(settings, db, LocalBlobStore(settings.blob_dir), dispatcher)
    install_metrics(app, app.state.services)
    app.state.require_keys, app.state.tenant = require_keys, tenant
    install_error_handlers(app)
    app.include_router(documents.router, responses=error_responses(401) if require_keys else None)
    app.include_router(batches.router, responses=error_responses(401) if require_keys else None)
    app.include_router(deliveries.router, responses=error_responses(401) if require_keys else None)
    app.include_router(health.router)
    app.include_router(web.router)
    return app
