"""Health for people and for orchestrators: /health and /readyz ask the database (/readyz the blob store too, and
the broker, when there is one); /healthz only says the process answers, so a database outage does not get every
API process restarted.

/readyz also says when the recognition model does not load where recognize runs: in this process (embedded) or
on any GPU worker that reported (distributed). A model that is absent (none asked for, or not on this machine) is
a note, not a problem: the service is up, and the regions that need the model are skipped with the reason. Until
a host has found out, nothing is reported and /readyz stays 200: uploads are durable and queue until a GPU worker
takes them, so the API is ready before GPU workers start (or while they scale from zero), and a model that loads
fine is no problem either.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis
from fastapi import APIRouter, Response
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from api.deps import ContextDep
from api.schemas import Health
from pipeline.db.errors import database_unavailable
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import ModelReporting
from pipeline.jobs.model_status import ModelStatus
from pipeline.storage import BlobStoreUnavailable

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health)
def health(ctx: ContextDep) -> Health:
    with ctx.db.connect() as connection:
        connection.execute(text("SELECT 1"))
    return Health(status="ok")


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
def readyz(ctx: ContextDep, response: Response) -> Health:
    """Ready when the database, the blob store and (in the distributed mode) the broker answer and no recognition
    host says its model does not load; 503 with what failed otherwise."""
    broker = _broker(ctx)
    problems = [problem for problem in (_database(ctx), _blobs(ctx), broker) if problem]
    statuses = [] if broker else _models(ctx)  # the GPU workers report through the broker
    problems += _lines(status.problem if isinstance(status, ModelStatus) else status for status in statuses)
    notes = _lines(status.note for status in statuses if isinstance(status, ModelStatus))
    if problems:
        response.status_code = 503
        return Health(status="unavailable", problems=problems, notes=notes)
    return Health(status="ok", notes=notes)


def _database(ctx: Context) -> str | None:
    try:
        with ctx.db.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:  # with a stable code: database_missing, database_refused, database_unreachable
        unavailable = database_unavailable(exc, ctx.settings.database_url)
        return f"database: {unavailable.code}: {unavailable}"
    except Exception as exc:
        return f"database: {type(exc).__name__}: {exc}"
    return None


def _blobs(ctx: Context) -> str | None:
    try:
        ctx.blobs.check()
    except BlobStoreUnavailable as exc:  # blob_store_unreachable, blob_store_denied, blob_store_missing, ...
        return f"blobs: {exc.code}: {exc}"
    return None


def _broker(ctx: Context) -> str | None:
    if not ctx.settings.broker_url:
        return None
    try:
        redis.Redis.from_url(ctx.settings.broker_url, socket_timeout=2, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"broker: {type(exc).__name__}: {exc}"
    return None


def _models(ctx: Context) -> list[ModelStatus | str]:
    """Each recognition host's model status, or the problem line of statuses that could not be read."""
    if not isinstance(ctx.dispatcher, ModelReporting):
        return []
    try:
        return list(ctx.dispatcher.model_statuses())
    except Exception as exc:  # the broker answered the ping but not this read
        return [f"model: status unreadable: {type(exc).__name__}: {exc}"]


def _lines(lines: Iterable[str | None]) -> list[str]:
    """Each distinct line once (many GPU workers on one checkpoint fail alike), in order."""
    return list(dict.fromkeys(line for line in lines if line))
