"""The service's commands: `quire serve` (the API, with the embedded workers unless a broker is configured), `quire
worker` (a Celery worker of the distributed mode) and `quire migrate`.

This is the program's composition root: these commands build the API app and the workers, so they import `api`
and `workers`, inside the commands (every `quire` command parses these arguments, and most need neither).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from pipeline.cli.common import add_quantization_flag, settings_from_flags
from pipeline.config import get_settings
from pipeline.logs import configure_logging

if TYPE_CHECKING:
    from workers.embedded import EmbeddedWorkers
    from workers.engine_host import EngineHost


def add_service_parsers(commands: argparse._SubParsersAction) -> None:
    commands.add_parser("migrate", help="create or upgrade the database (QUIRE_DATABASE_URL) to the newest schema")
    serve = commands.add_parser(
        "serve", help="the REST API; without QUIRE_BROKER_URL the workers run inside it (the embedded mode)",
        description="Upgrades the database, then serves /v1/documents. Embedded mode (no QUIRE_BROKER_URL): SQLite "
                    "and local blobs under QUIRE_CACHE_DIR unless configured, the engine and the workers in this "
                    "process. Distributed mode: only the API; run `quire worker` processes beside it.")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--model", default=None,
                       help="local directory or hub id (default: QUIRE_MODEL); `none`, or weights not on this "
                            "machine: no model, regions that need one are skipped")
    add_quantization_flag(serve)
    worker = commands.add_parser("worker", help="a Celery worker of the distributed mode (needs QUIRE_BROKER_URL)")
    worker.add_argument("--queues", default="cpu,gpu", help="cpu, gpu or both (default: cpu,gpu)")
    worker.add_argument("--concurrency", type=int, default=None,
                        help="tasks at once (default: the CPU count for cpu; for gpu QUIRE_GPU_THREADS, else enough "
                             "pages to fill the engine's batch: 64 on CUDA, 8 on a CPU)")
    worker.add_argument("--loglevel", default="INFO")
    worker.add_argument("--model", default=None, help="a gpu worker's local directory or hub id (default: QUIRE_MODEL)")
    add_quantization_flag(worker)


def serve(args: argparse.Namespace) -> int:
    """`quire serve`: the API, with in-process workers and a resident engine unless a broker is configured; either
    way the API and the stages share one Context (pipeline/jobs/context.py `open_context`)."""
    import uvicorn

    from api.app import create_app
    from api.auth import keys_required, startup_notice
    from pipeline.db.migrate import upgrade_to_head
    from pipeline.jobs.context import open_context

    settings = settings_from_flags(model=args.model, quantization=args.quantization)
    configure_logging(settings.log_format)
    require_keys = keys_required(settings.api_keys, args.host)
    print(startup_notice(settings.api_keys, args.host), file=sys.stderr, flush=True)
    upgrade_to_head(settings.database_url)
    if settings.broker_url:
        from workers.celery_app import CeleryDispatcher, app

        context = open_context(settings, CeleryDispatcher(app))
        try:
            uvicorn.run(create_app(context, require_keys), host=args.host, port=args.port, log_config=None)
        finally:
            context.close()
        return 0
    from pipeline.documents.lazy_recognizer import NO_MODEL
    from pipeline.engine.model.loader import named_directory
    from pipeline.engine_settings import gpu_threads
    from workers.embedded import EmbeddedWorkers
    from workers.engine_host import EngineHost

    if settings.model != NO_MODEL:  # a typo in a model path stops the service at once (exit 2)
        named_directory(settings.model)
    host = EngineHost(settings)
    workers = EmbeddedWorkers(settings, host, settings.cpu_threads, gpu_threads(settings))
    try:
        load_models(workers, host)
        workers.resume()
        uvicorn.run(create_app(workers.context, require_keys), host=args.host, port=args.port, log_config=None)
    finally:
        workers.close()
        host.close()
    return 0


def load_models(workers: EmbeddedWorkers, host: EngineHost) -> None:
    """Load the layout model, then the engine (whose KV cache takes a share of the GPU memory left), at start
    rather than on the first page. Without a model (none asked for, or not on this machine) the service runs as
    `quire process` does, saying so once: regions that need one are skipped with the reason. A model there but
    broken raises CheckpointError (main reports it: exit 2)."""
    workers.context.preload_layout()
    unavailable = host.load()
    if unavailable is not None:
        logging.getLogger("quire").warning(f"{unavailable} Serving without a recognition model: regions that need "
                                           "one are skipped, with the reason", extra={"code": unavailable.code})


def worker(args: argparse.Namespace) -> int:
    """`quire worker`: Celery on the given queues; threads when it serves gpu, so its tasks share one engine."""
    for name, value in (("QUIRE_MODEL", args.model), ("QUIRE_QUANTIZATION", args.quantization)):
        if value:  # the tasks read their settings from the environment (workers/tasks.py)
            os.environ[name] = value
    settings = get_settings()
    if not settings.broker_url:
        print("error: QUIRE_BROKER_URL is not set; `quire serve` alone runs the embedded mode", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, args.loglevel)
    from pipeline.blob_url import open_blob_store
    from pipeline.db.migrate import upgrade_to_head
    from pipeline.engine_settings import gpu_threads

    upgrade_to_head(settings.database_url)
    open_blob_store(settings).check()  # a store that cannot be used stops the worker now, in one line (_run)
    from workers.celery_app import app

    queues = [queue.strip() for queue in args.queues.split(",") if queue.strip()]
    pool = "threads" if "gpu" in queues else "prefork"
    if settings.metrics_port and "gpu" in queues:
        _serve_engine_metrics(settings.metrics_port)
    if "gpu" in queues and settings.prepare_queue in queues:
        _preload_layout()
    concurrency = args.concurrency or (gpu_threads(settings) if "gpu" in queues else None)
    argv = ["worker", "--queues", ",".join(queues), "--pool", pool, "--loglevel", args.loglevel,
            "--hostname", f"quire-{'-'.join(queues)}@%h"]
    app.worker_main(argv + (["--concurrency", str(concurrency)] if concurrency else []))
    return 0


def _preload_layout() -> None:
    """A GPU worker that prepares pages too loads its layout model now, before its engine, whose KV cache takes a
    share of the GPU memory left when it loads (on the first recognize task)."""
    from workers.tasks import context

    context().preload_layout()


def _serve_engine_metrics(port: int) -> None:
    """The GPU worker's engine counters on http://0.0.0.0:port/metrics (the API cannot see another process's)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from pipeline.engine_metrics import EngineCollector
    from workers.tasks import context

    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: context().recognition.stats()))
    start_http_server(port, registry=registry)


def migrate(args: argparse.Namespace) -> int:
    """`quire migrate`: Alembic's upgrade to head on the configured database (a no-op when it is current)."""
    from sqlalchemy.engine import make_url

    from pipeline.db.migrate import upgrade_to_head

    url = get_settings().database_url
    upgrade_to_head(url)
    print(f"database at the newest schema: {make_url(url).render_as_string(hide_password=True)}")
    return 0
