"""The `quire` command."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .account_commands import add_account_parsers, keys, tenants
from .config import get_settings
from .logs import configure_logging

if TYPE_CHECKING:
    from workers.embedded import EmbeddedWorkers
    from workers.engine_host import EngineHost

    from .config import Settings
    from .documents.layout import LayoutBackend
    from .documents.process import FinishedPage, PageCallback
    from .engine.engine import Engine


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"demo": _demo, "recognize": _recognize, "engine": _serve_engine, "process": _process,
                "migrate": _migrate, "serve": _serve, "worker": _worker, "keys": keys, "tenants": tenants}
    return commands[args.command](args)


def build_parser() -> argparse.ArgumentParser:
    """Every `quire` command with its options; tests/test_deploy.py checks docker-compose.yml's commands by it."""
    parser = argparse.ArgumentParser(prog="quire", description="Document OCR on PaddleOCR-VL")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="recognise a sample image with a tiny random checkpoint")
    demo.add_argument("--checkpoint", type=Path, help="where to write the tiny checkpoint (default: cache dir)")
    demo.add_argument("--max-tokens", type=int, default=32)
    recognize = commands.add_parser("recognize", help="recognise image files with a model")
    recognize.add_argument("images", nargs="+", type=Path)
    recognize.add_argument("--model", default=None, help="local directory or hub id")
    recognize.add_argument("--task", default="ocr", choices=["ocr", "table", "formula", "chart", "spotting", "seal"])
    recognize.add_argument("--max-tokens", type=int, default=None)
    _add_process_parser(commands)
    engine = commands.add_parser("engine", help="the inference engine on its own")
    engine_commands = engine.add_subparsers(dest="engine_command", required=True)
    serve = engine_commands.add_parser("serve", help="OpenAI-compatible chat completions server")
    serve.add_argument("--model", default=None, help="local directory or hub id")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default=None, help="model id clients send (default: --model)")
    serve.add_argument("--max-num-seqs", type=int, default=None,
                       help="requests decoded together at most (default: QUIRE_MAX_NUM_SEQS, else 256 on CUDA, 32 on "
                            "a CPU)")
    serve.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                       help="weights and KV cache dtype (default: QUIRE_DTYPE, auto: bfloat16 on CUDA, else float32)")
    serve.add_argument("--device", default=None,
                       help="auto, cpu, cuda or cuda:N (default: QUIRE_DEVICE, auto: CUDA when torch sees a GPU)")
    commands.add_parser("migrate", help="create or upgrade the database (QUIRE_DATABASE_URL) to the newest schema")
    _add_service_parsers(commands)
    add_account_parsers(commands)
    return parser


def _add_process_parser(commands: argparse._SubParsersAction) -> None:
    settings = get_settings()
    process = commands.add_parser(
        "process", help="documents to Markdown and JSON, with page images and region overlays",
        description="Writes NAME.md, NAME.json and NAME.pages/ per input into the output directory. A directory "
                    "input stands for every PDF/TIFF/PNG/JPEG/WebP file in it; inputs whose NAME.json exists are "
                    "skipped unless --force.")
    process.add_argument("inputs", nargs="+", type=Path, metavar="FILE", help="document files or directories")
    process.add_argument("-o", "--output", type=Path, default=Path("."), help="output directory (default: .)")
    process.add_argument("--layout", default=settings.layout, choices=["auto", "pp-doclayout", "pdf", "page"],
                         help="layout backend (default: QUIRE_LAYOUT or auto)")
    process.add_argument("--layout-model", default=None,
                         help="PP-DocLayoutV2/V3 directory or hub id (default: QUIRE_LAYOUT_MODEL)")
    process.add_argument("--dpi", type=int, default=settings.dpi, help="page rendering resolution (default: 200)")
    process.add_argument("--model", default=None, help="local directory or hub id (default: QUIRE_MODEL)")
    process.add_argument("--device", default=None,
                         help="auto, cpu, cuda or cuda:N, for the engine and, unless QUIRE_LAYOUT_DEVICE says "
                              "otherwise, the layout model (default: QUIRE_DEVICE, auto: CUDA when torch sees a GPU)")
    process.add_argument("--text-layer", default=settings.text_layer, choices=["auto", "off"],
                         help="auto: born-digital text regions take the PDF's text instead of the model's")
    process.add_argument("--max-tokens", type=int, default=None, help="per region (default: QUIRE_MAX_TOKENS)")
    process.add_argument("--password", default=None, help="opens encrypted PDFs")
    process.add_argument("--charts", action="store_true", default=settings.recognize_charts,
                         help="recognise charts (Chart Recognition:) instead of keeping them as pictures")
    process.add_argument("--seals", action="store_true", default=settings.recognize_seals,
                         help="recognise seals (Seal Recognition:) instead of keeping them as pictures")
    process.add_argument("--force", action="store_true", help="redo inputs whose output already exists")


def _process(args: argparse.Namespace) -> int:
    """`quire process`: 0 when every input has a result, 1 when any input failed, 2 when nothing could start."""
    from .documents.layout import layout_backend
    from .documents.layout_weights import LayoutModelUnavailable
    from .engine_settings import layout_device

    settings = _settings(device=args.device)
    todo, names, missing = _inputs_to_process(args.inputs, args.output, args.force)
    if not todo:
        return 1 if missing else 0
    try:  # before the engine, which sizes its KV cache from the GPU memory the layout model leaves free
        layout = layout_backend(args.layout, args.layout_model, layout_device(settings))
    except LayoutModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model = str(args.model or settings.model)
    engine = _load_engine(model, settings)
    if engine is None:
        return 2
    try:
        failed = _process_all(todo, names, engine, layout, args, model)
    finally:
        engine.close()
    return 1 if failed or missing else 0


def _inputs_to_process(inputs: list[Path], output: Path, force: bool) -> tuple[list[Path], dict[Path, str], int]:
    """(files to process, their output NAMEs, how many inputs do not exist); finished ones are skipped, said so."""
    from .documents.outputs import output_names
    from .documents.process import expand_inputs

    missing = [path for path in inputs if not path.exists()]
    for path in missing:
        print(f"error: {path}: no such file or directory", file=sys.stderr)
    files = expand_inputs([path for path in inputs if path.exists()])
    names = output_names(files)
    todo = []
    for path in files:
        if not force and (output / f"{names[path]}.json").exists():
            print(f"skip {path}: {names[path]}.json exists (--force redoes it)", file=sys.stderr)
        else:
            todo.append(path)
    return todo, names, len(missing)


def _process_all(todo: list[Path], names: dict[Path, str], engine: Engine, layout: LayoutBackend,
                 args: argparse.Namespace, model: str) -> int:
    """Process and write each file in turn through the one engine; the number of documents that failed."""
    from .documents.ingest import Limits
    from .documents.outputs import DocumentWriter
    from .documents.process import ProcessOptions, process_file
    from .documents.recognize import EngineRecognizer
    from .documents.regions import RegionOptions

    settings = get_settings()
    regions = RegionOptions(settings.crop_margin_pt, args.text_layer, recognize_charts=args.charts,
                            recognize_seals=args.seals)
    options = ProcessOptions(Limits(dpi=args.dpi), regions, args.password, settings.pages_in_flight)
    recognizer = EngineRecognizer(engine, args.max_tokens or settings.max_tokens)
    failed = 0
    for number, path in enumerate(todo, 1):
        writer = DocumentWriter(args.output, names[path], settings.crop_margin_pt)
        writer.start()
        progress = _Progress(f"[{number}/{len(todo)}] {path.name}")
        document = process_file(path, recognizer, layout, options, progress.wrap(writer.page), model=model)
        writer.finish(document)
        progress.done(document.status, document.error.code if document.error else None)
        failed += document.status == "failed"
    return failed


def _settings(**flags: object) -> Settings:
    """The settings, with each command-line flag that was given (not None) in place of its QUIRE_* variable."""
    return get_settings().model_copy(update={key: value for key, value in flags.items() if value is not None})


def _load_engine(model: str, settings: Settings) -> Engine | None:
    """The engine, or None after saying on stderr how to get weights (or the tiny demo checkpoint)."""
    from .engine.engine import Engine
    from .engine.model.loader import CheckpointError
    from .engine_settings import engine_kwargs

    try:
        return Engine.from_pretrained(model, **engine_kwargs(settings))
    except CheckpointError as exc:
        _say_model_missing(exc, "quire process FILE --model {tiny}")
        return None


def _say_model_missing(exc: Exception, command: str) -> None:
    """The loader's message, and how to try `command` on the demo's tiny checkpoint instead of real weights."""
    tiny = get_settings().cache_dir / "tiny-checkpoint"
    print(f"error: {exc}\nTo try Quire without the real weights: `quire demo` writes a tiny random checkpoint to "
          f"{tiny}; then `{command.format(tiny=tiny)}` (its text is not meaningful).", file=sys.stderr)


class _Progress:
    """A one-line progress bar on stderr, redrawn per page on a terminal, printed once when done otherwise."""

    WIDTH = 24

    def __init__(self, label: str) -> None:
        self.label, self.started = label, time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.pages = 0

    def wrap(self, on_page: PageCallback) -> PageCallback:
        """on_page, counting pages and redrawing the bar after each."""

        def counted(finished: FinishedPage) -> None:
            on_page(finished)
            self.pages += 1
            if self.tty:
                filled = self.WIDTH * self.pages // max(1, finished.page_count)
                bar = "#" * filled + "." * (self.WIDTH - filled)
                print(f"\r{self.label} [{bar}] {self.pages}/{finished.page_count} pages "
                      f"{time.perf_counter() - self.started:.1f}s", end="", file=sys.stderr, flush=True)

        return counted

    def done(self, status: str, error: str | None) -> None:
        outcome = f"{status} ({error})" if error else status
        end = "\r" if self.tty else ""
        print(f"{end}{self.label}: {self.pages} pages, {outcome}, {time.perf_counter() - self.started:.1f}s"
              + " " * 8, file=sys.stderr)


def _add_service_parsers(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve", help="the REST API; without QUIRE_BROKER_URL the workers run inside it (the embedded mode)",
        description="Upgrades the database, then serves /v1/documents. Embedded mode (no QUIRE_BROKER_URL): SQLite "
                    "and local blobs under QUIRE_CACHE_DIR unless configured, the engine and the workers in this "
                    "process. Distributed mode: only the API; run `quire worker` processes beside it.")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    worker = commands.add_parser("worker", help="a Celery worker of the distributed mode (needs QUIRE_BROKER_URL)")
    worker.add_argument("--queues", default="cpu,gpu", help="cpu, gpu or both (default: cpu,gpu)")
    worker.add_argument("--concurrency", type=int, default=None,
                        help="tasks at once (default: the CPU count for cpu; for gpu QUIRE_GPU_THREADS, else enough "
                             "pages to fill the engine's batch: 64 on CUDA, 8 on a CPU)")
    worker.add_argument("--loglevel", default="INFO")


def _serve(args: argparse.Namespace) -> int:
    """`quire serve`: the API, with in-process workers and a resident engine unless a broker is configured."""
    import uvicorn

    from api.app import create_app
    from api.auth import keys_required, startup_notice

    from .db.migrate import upgrade_to_head
    from .db.session import get_engine
    from .storage import LocalBlobStore

    settings = get_settings()
    configure_logging(settings.log_format)
    require_keys = keys_required(settings.api_keys, args.host)
    print(startup_notice(settings.api_keys, args.host), file=sys.stderr, flush=True)
    upgrade_to_head(settings.database_url)
    db, blobs = get_engine(settings.database_url), LocalBlobStore(settings.blob_dir)
    if settings.broker_url:
        from workers.celery_app import CeleryDispatcher, app

        uvicorn.run(create_app(settings, CeleryDispatcher(app), require_keys), host=args.host, port=args.port,
                    log_config=None)
        return 0
    from workers.embedded import EmbeddedWorkers
    from workers.engine_host import EngineHost

    from .engine_settings import gpu_threads

    host = EngineHost(settings)
    workers = EmbeddedWorkers(settings, db, blobs, host, settings.cpu_threads, gpu_threads(settings))
    try:
        if not _load_models(workers, host):
            return 2
        workers.resume()
        uvicorn.run(create_app(settings, workers, require_keys), host=args.host, port=args.port, log_config=None)
    finally:
        workers.close()
        host.close()
    return 0


def _load_models(workers: EmbeddedWorkers, host: EngineHost) -> bool:
    """Load the layout model, then the engine (whose KV cache takes a share of the GPU memory left), at start
    rather than on the first page; False after saying how to get a missing recognition model."""
    from .engine.model.loader import CheckpointError

    workers.context.preload_layout()
    try:
        host.engine  # noqa: B018 - a property that loads it
    except CheckpointError as exc:
        _say_model_missing(exc, "QUIRE_MODEL={tiny} quire serve")
        return False
    return True


def _worker(args: argparse.Namespace) -> int:
    """`quire worker`: Celery on the given queues; threads when it serves gpu, so its tasks share one engine."""
    settings = get_settings()
    if not settings.broker_url:
        print("error: QUIRE_BROKER_URL is not set; `quire serve` alone runs the embedded mode", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, args.loglevel)
    from .db.migrate import upgrade_to_head
    from .engine_settings import gpu_threads

    upgrade_to_head(settings.database_url)
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

    from workers.tasks import context

    from .metrics import EngineCollector

    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: context().recognition.stats()))
    start_http_server(port, registry=registry)


def _migrate(args: argparse.Namespace) -> int:
    """`quire migrate`: Alembic's upgrade to head on the configured database (a no-op when it is current)."""
    from sqlalchemy.engine import make_url

    from .db.migrate import upgrade_to_head

    url = get_settings().database_url
    upgrade_to_head(url)
    print(f"database at the newest schema: {make_url(url).render_as_string(hide_password=True)}")
    return 0


def _serve_engine(args: argparse.Namespace) -> int:
    import uvicorn

    from .engine.engine import Engine
    from .engine.model.loader import CheckpointError
    from .engine.server import create_app
    from .engine_settings import engine_kwargs

    settings = _settings(device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs)
    model = args.model or settings.model
    try:
        engine = Engine.from_pretrained(model, **engine_kwargs(settings))
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app = create_app(engine, args.served_model_name or str(model), default_max_tokens=settings.max_tokens)
    try:
        uvicorn.run(app, host=args.host, port=args.port)
    finally:
        engine.close()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .engine.sample import sample_image
    from .engine.tiny_checkpoint import write_tiny_checkpoint

    directory = args.checkpoint or get_settings().cache_dir / "tiny-checkpoint"
    if not (directory / "model.safetensors").exists():
        write_tiny_checkpoint(directory)
    image_path = directory.parent / "sample.png"
    sample_image().save(image_path)
    print(f"tiny random checkpoint: {directory}  (random weights: the text is not meaningful)")
    return _recognize(argparse.Namespace(images=[image_path], model=str(directory), task="ocr",
                                         max_tokens=args.max_tokens))


def _recognize(args: argparse.Namespace) -> int:
    from .engine.engine import Engine
    from .engine.model.loader import CheckpointError
    from .engine.processor import TASK_PROMPTS, ImageError
    from .engine.request import Request
    from .engine_settings import engine_kwargs

    settings = get_settings()
    started = time.perf_counter()
    try:
        engine = Engine.from_pretrained(args.model or settings.model, **engine_kwargs(settings))
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loaded = time.perf_counter()
    max_tokens = args.max_tokens or settings.max_tokens
    for path in args.images:
        request = Request(TASK_PROMPTS[args.task], [path.read_bytes()], max_tokens=max_tokens)
        try:
            out = engine.generate([request])[0]
        except ImageError as exc:
            print(json.dumps({"image": str(path), "error": exc.code, "message": str(exc)}))
            continue
        print(json.dumps({"image": str(path), "text": out.text, "finish_reason": out.finish_reason,
                          "prompt_tokens": out.prompt_tokens, "generated_tokens": out.generated_tokens,
                          "ttft_ms": round(out.ttft_s * 1000, 1), "tpot_ms": round(out.tpot_s * 1000, 2)},
                         ensure_ascii=False))
    print(f"load {loaded - started:.2f}s, total {time.perf_counter() - started:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
