"""The HTTP service: the FastAPI app over the database, the blob store and a dispatcher that starts the workers.

The app owns nothing global: `create_app` gets the Context that `open_context` built (pipeline/jobs/context.py),
so the embedded mode (the same Context its in-process workers run with), the distributed mode (Celery) and the
tests each give it their own, and whoever opened that Context closes it.
"""

from __future__ import annotations

from fastapi import FastAPI

from api.auth import KEYLESS_TENANT
from api.errors import error_responses, install_error_handlers
from api.metrics import install_metrics
from api.routes import batches, deliveries, documents, health, web
from pipeline.jobs.context import Context

DESCRIPTION = """Quire turns scanned and born-digital documents into Markdown and JSON.

Upload with `POST /v1/documents`, poll `GET /v1/documents/{id}`, then fetch `GET /v1/documents/{id}/result`.
Errors are `{"error": {"code", "message"}}`; branch on `code`, which is stable."""


def create_app(context: Context, require_keys: bool = False, tenant: str = KEYLESS_TENANT) -> FastAPI:
    """The API over context; each request acts for its API key's tenant, or for `tenant` when keys are not required
    (see `api.auth.keys_required`). The schema must already be migrated (`quire migrate`)."""
    app = FastAPI(title="Quire", version="1", description=DESCRIPTION)
    app.state.context = context
    install_metrics(app, context)
    app.state.require_keys, app.state.tenant = require_keys, tenant
    install_error_handlers(app)
    app.include_router(documents.router, responses=error_responses(401) if require_keys else None)
    app.include_router(batches.router, responses=error_responses(401) if require_keys else None)
    app.include_router(deliveries.router, responses=error_responses(401) if require_keys else None)
    app.include_router(health.router)
    app.include_router(web.router)
    return app
