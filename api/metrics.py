"""Prometheus metrics of the API process at /metrics: its HTTP requests, and the service as the database and the
dispatcher see it (documents by status, pages finished per second, queue depths, the engine when it runs here).

Everything but the request counters is read at scrape time, so a scrape costs two small queries and no state is
kept between scrapes. Each app has its own registry (tests build many apps in one process).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from pipeline.db.models import DOCUMENT_STATUSES, Document, Page, utcnow
from pipeline.db.session import session_scope
from pipeline.engine_metrics import EngineCollector
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Observable

RATE_WINDOW = timedelta(seconds=60)  # pages/s is the pages finished in the last minute, over a minute


class ServiceCollector(Collector):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        documents = GaugeMetricFamily("quire_documents", "Documents by status", labels=["status"])
        with session_scope(self.ctx.db) as session:
            counts = dict(session.execute(select(Document.status, func.count()).group_by(Document.status)).all())
            since = utcnow() - RATE_WINDOW
            finished = session.scalar(select(func.count()).select_from(Page).where(
                Page.status.in_(("succeeded", "failed")), Page.updated_at >= since)) or 0
        for status in DOCUMENT_STATUSES:
            documents.add_metric([status], counts.get(status, 0))
        yield documents
        yield GaugeMetricFamily("quire_pages_per_second", "Pages finished per second over the last minute",
                                value=finished / RATE_WINDOW.total_seconds())
        dispatcher = self.ctx.dispatcher
        if isinstance(dispatcher, Observable):
            depths = GaugeMetricFamily("quire_queue_depth", "Tasks waiting per queue", labels=["queue"])
            for queue, depth in dispatcher.queue_depths().items():
                depths.add_metric([queue], depth)
            yield depths


def install_metrics(app: FastAPI, ctx: Context) -> None:
    """Count every request by route and status, and serve the registry at GET /metrics."""
    registry = CollectorRegistry()
    requests = Counter("quire_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry)
    latency = Histogram("quire_http_request_seconds", "HTTP request latency", ["method", "route"], registry=registry)
    registry.register(ServiceCollector(ctx))
    dispatcher = ctx.dispatcher
    if isinstance(dispatcher, Observable):
        registry.register(EngineCollector(dispatcher.engine_stats))

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")  # the template, never the raw path
        requests.labels(request.method, route, str(response.status_code)).inc()
        latency.labels(request.method, route).observe(time.perf_counter() - started)
        return response

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
