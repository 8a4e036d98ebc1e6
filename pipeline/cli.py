"""The `quire` command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .account_commands import add_account_parsers, keys, tenants
from .config import DPI_MAX, DPI_MIN, get_settings
from .logs import configure_logging
from .model_commands import add_model_parsers, models

if TYPE_CHECKING:
    from workers.embedded import EmbeddedWorkers
    from workers.engine_host import EngineHost

    from .config import Settings
    from .documents.lazy_recognizer import ModelUnavailable
    from .documents.page_ranges import PageRanges
    from .documents.process import FinishedPage
    from .documents_api import DocumentProcessor
    from .engine.engine import Engine


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"demo": _demo, "recognize": _recognize, "engine": _serve_engine, "process": _process,
                "migrate": _migrate, "serve": _serve, "worker": _worker, "keys": keys, "tenants": tenants,
                "models": models}
    return _run(commands[args.command], args)


def _run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """The one place a model, a database or a blob store that cannot be used becomes one message and exit status 2."""
    from .db.errors import DatabaseUnavailable
    from .engine.errors import CheckpointError
    from .storage import BlobStoreUnavailable

    try:
        return command(args)
    except (CheckpointError, DatabaseUnavailable, BlobStoreUnavailable) as exc:
        hint = _DEMO_COMMANDS.get(args.command) if exc.code == "model_unavailable" else None
        message = str(exc) + (_demo_hint(hint) if hint else "")
        if args.command in ("serve", "worker"):  # their logs are configured: one line with the stable code
            logging.getLogger("quire").error(message, extra={"code": exc.code})
        else:
            print(f"error: {message}", file=sys.stderr)
        return 2


# what to run on the demo's tiny checkpoint instead, per command, when the model is not available
_DEMO_COMMANDS = {"serve": "QUIRE_MODEL={tiny} quire serve", "recognize": "quire recognize IMAGE --model {tiny}",
                  "engine": "quire engine serve --model {tiny}"}


def build_parser() -> argparse.ArgumentParser:
    """Every `quire` command with its options; tests/test_deploy.py checks docker-compose.yml's commands by it."""
    parser = argparse.ArgumentParser(prog="quire", description="Document OCR on PaddleOCR-VL")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="a sample PDF to Markdown, JSON and overlays (the real model if it is "
                                            "here, else a tiny random checkpoint)")
    demo.add_argument("--checkpoint", type=Path, help="where to write the tiny checkpoint (default: cache dir)")
    demo.add_argument("--max-tokens", type=int, default=None,
                      help="per region (default: 32 on the tiny checkpoint, the per-task limits on the real model)")
    recognize = commands.add_parser("recognize", help="recognise image files with a model")
    recognize.add_argument("images", nargs="+", type=Path)
    recognize.add_argument("--model", default=None, help="local directory or hub id")
    recognize.add_argument("--task", default="ocr", choices=["ocr", "table", "formula", "chart", "spotting", "seal"])
    recognize.add_argument("--max-tokens", type=int, default=None)
    _add_quantization_flag(recognize)
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
    _add_quantization_flag(serve)
    commands.add_parser("migrate", help="create or upgrade the database (QUIRE_DATABASE_URL) to the newest schema")
    _add_service_parsers(commands)
    add_account_parsers(commands)
    add_model_parsers(commands)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quire")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _add_process_parser(commands: argparse._SubParsersAction) -> None:
    settings = get_settings()
    process = commands.add_parser(
        "process", help="documents to Markdown and JSON, with page images and region overlays",
        description="Writes NAME.md, NAME.json and NAME.pages/ per input into the output directory. A file named "
                    "here is always processed; a directory stands for every PDF/TIFF/PNG/JPEG/WebP file in it (and "
                    "below it with -r), skipping those whose NAME.json exists unless --force. Exit status: 0 done, "
                    "1 some input failed, 2 layout weights missing or a broken model, 3 regions that need the model "
                    "were skipped (none asked for or here).")
    process.add_argument("inputs", nargs="+", type=Path, metavar="FILE", help="document files or directories")
    process.add_argument("-o", "--output", type=_output_directory, default=Path("."),
                         help="output directory (default: .)")
    process.add_argument("--layout", default=settings.layout, choices=["auto", "pp-doclayout", "pdf", "page"],
                         help="layout backend (default: QUIRE_LAYOUT or auto)")
    process.add_argument("--layout-model", default=None,
                         help="PP-DocLayoutV2/V3 directory or hub id (default: QUIRE_LAYOUT_MODEL)")
    process.add_argument("--dpi", type=_dpi, default=settings.dpi,
                         help=f"page rendering resolution, {DPI_MIN} to {DPI_MAX} (default: QUIRE_DPI or 200)")
    process.add_argument("--model", default=None,
                         help="local directory or hub id (default: QUIRE_MODEL), loaded when a region needs it; "
                              "`none`: no model, regions that need one are skipped")
    process.add_argument("-r", "--recursive", action="store_true", help="directories: their subdirectories too")
    process.add_argument("--pages", type=_page_ranges, default=None, help="only these pages, e.g. 1-5,9 or 7-")
    process.add_argument("--device", default=None,
                         help="auto, cpu, cuda or cuda:N, for the engine and, unless QUIRE_LAYOUT_DEVICE says "
                              "otherwise, the layout model (default: QUIRE_DEVICE, auto: CUDA when torch sees a GPU)")
    process.add_argument("--text-layer", default=settings.text_layer, choices=["auto", "off"],
                         help="auto: born-digital text regions take the PDF's text instead of the model's")
    process.add_argument("--max-tokens", type=int, default=None, help="per region (default: QUIRE_MAX_TOKENS)")
    process.add_argument("--password", default=None, help="opens encrypted PDFs")
    _add_quantization_flag(process)
    process.add_argument("--charts", action="store_true", default=settings.recognize_charts,
                         help="recognise charts (Chart Recognition:) instead of keeping them as pictures")
    process.add_argument("--seals", action="store_true", default=settings.recognize_seals,
                         help="recognise seals (Seal Recognition:) instead of keeping them as pictures")
    process.add_argument("--force", action="store_true", help="redo inputs whose output already exists")


def _add_quantization_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quantization", default=None, choices=["none", "int8", "int4"],
                        help="the decoder's and head's weights, quantized as they load (default: QUIRE_QUANTIZATION "
                             "or none; a checkpoint from `quire models quantize` loads in its own)")


def _output_directory(text: str) -> Path:
    """The output directory, refused at once where a file stands in its way (it is made when the first file is
    written)."""
    path = Path(text)
    blocking = next((part for part in (path, *path.parents) if part.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise argparse.ArgumentTypeError(f"{blocking} exists and is not a directory")
    return path


def _dpi(text: str) -> int:
    try:
        dpi = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not DPI_MIN <= dpi <= DPI_MAX:
        raise argparse.ArgumentTypeError(f"{dpi} is out of range: {DPI_MIN} to {DPI_MAX}")
    return dpi


def _page_ranges(text: str) -> PageRanges:
    from .documents.page_ranges import parse_page_ranges

    try:
        return parse_page_ranges(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _process(args: argparse.Namespace) -> int:
    """`quire process`: 0 when every input has a result, 1 when any input failed, 2 when the layout model is missing
    or the recognition model is there but broken, 3 when every input has a result but regions that need the model
    were skipped for want of one (`--model none`, or it is not on this machine)."""
    from .documents.layout_weights import LayoutModelUnavailable
    from .documents.lazy_recognizer import ABSENT, NO_MODEL
    from .documents_api import DocumentProcessor
    from .engine.model.loader import named_directory

    settings = _settings(device=args.device, model=args.model, layout=args.layout, layout_model=args.layout_model,
                         dpi=args.dpi, text_layer=args.text_layer, recognize_charts=args.charts,
                         recognize_seals=args.seals, quantization=args.quantization)
    if settings.model != NO_MODEL:  # a typo in a model path stops the run at once (exit 2), before any page
        named_directory(settings.model)
    todo, names, refused = _inputs_to_process(args.inputs, args.output, args.force, args.recursive)
    if not todo:
        return 1 if refused else 0
    try:  # the layout model loads first: the engine sizes its KV cache from the GPU memory it leaves free
        processor = DocumentProcessor(settings, password=args.password, pages=args.pages, max_tokens=args.max_tokens,
                                      page_images=True)
    except LayoutModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with processor:
        failed, skipped = _process_all(todo, names, processor, args.output)
    broken = processor.unavailable is not None and processor.unavailable.code not in ABSENT
    return 2 if broken else 1 if failed or refused else 3 if skipped else 0


def _inputs_to_process(inputs: list[Path], output: Path, force: bool,
                       recursive: bool) -> tuple[list[Path], dict[Path, str], int]:
    """(files to process, their output NAMEs, how many inputs do not exist or are directories with no document).
    Files named are always processed; files a directory scan finds are skipped, said so, when their NAME.json exists
    (unless `force`)."""
    from .documents.outputs import output_names

    refused = [path for path in inputs if not path.exists()]
    for path in refused:
        print(f"error: {path}: no such file or directory", file=sys.stderr)
    files: list[Path] = []
    found_in: dict[Path, Path] = {}
    for path in (path for path in inputs if path.exists()):
        found = _scan(path, recursive) if path.is_dir() else [path]
        refused += [] if found else [path]
        files.extend(found)
        found_in.update({file: path for file in found if path.is_dir()})
    names = output_names(files, found_in)
    todo = []
    for path in files:
        if path in found_in and not force and (output / f"{names[path]}.json").exists():
            print(f"skip {path}: {names[path]}.json exists (--force redoes it)", file=sys.stderr)
        else:
            todo.append(path)
    return todo, names, len(refused)


def _scan(directory: Path, recursive: bool) -> list[Path]:
    """The documents in a directory, after saying which other files it leaves alone, or that it holds none."""
    from .documents.process import scan_directory
    from .documents.summary import plural

    found, others = scan_directory(directory, recursive)
    shown = [str(file.relative_to(directory)) for file in others[:_NAMES_SHOWN]]
    left = (f"{plural(len(others), 'other file')} left alone: {', '.join(shown)}"
            f"{', …' if len(others) > _NAMES_SHOWN else ''}") if others else ""
    if not found:
        print(f"error: {directory}: no PDF, TIFF, PNG, JPEG or WebP file in it{f' ({left})' if left else ''}",
              file=sys.stderr)
    elif left:
        print(f"{directory}: {left}", file=sys.stderr)
    return found


_NAMES_SHOWN = 5  # of the files a directory scan leaves alone, named on the console


def _process_all(todo: list[Path], names: dict[Path, str], processor: DocumentProcessor,
                 output: Path) -> tuple[int, int]:
    """Every file through the one processor, the next files' pages starting while earlier files finish; each file's
    outputs are written as it completes, and the console reports the files in input order: (documents that failed,
    documents with regions skipped for want of a model)."""
    from .documents.outputs import DocumentWriter
    from .documents.summary import summary_line

    failed = skipped = 0
    said_unavailable = False
    writers: dict[int, DocumentWriter] = {}
    console = _Console([path.name for path in todo])

    def writer(position: int) -> DocumentWriter:
        if position not in writers:
            writers[position] = DocumentWriter(output, names[todo[position]])
            writers[position].start()
        return writers[position]

    def on_page(position: int, finished: FinishedPage) -> None:
        writer(position).page(finished)
        console.page(position, finished.page_count)

    for position, document in processor.process_many(todo, on_page):
        written = writer(position)
        del writers[position]
        written.finish(document)
        if processor.unavailable is not None and not said_unavailable:
            _say_skipping(processor.unavailable)
            said_unavailable = True
        console.done(position, summary_line(document, [written.markdown_path, written.json_path, written.pages_dir]),
                     document.timings_ms.get("total"))
        failed += document.status == "failed"
        skipped += any(region.skipped for page in document.pages for region in page.regions)
    return failed, skipped


def _say_skipping(unavailable: ModelUnavailable) -> None:
    """Once per run: why regions that need the model are skipped, and (unless none was asked for) how to get it."""
    if unavailable.code == "model_none":
        print("--model none: regions that need the model are skipped", file=sys.stderr)
        return
    if unavailable.code == "model_unavailable":
        _say_model_missing(unavailable, "quire process FILE --model {tiny}")
    else:
        print(f"error: {unavailable}", file=sys.stderr)
    print("Meanwhile regions that need the model are skipped; the text layer's are done (`--model none` skips "
          "them without trying).", file=sys.stderr)


def _settings(**flags: object) -> Settings:
    """The settings, with each command-line flag that was given (not None) in place of its QUIRE_* variable."""
    return get_settings().model_copy(update={key: value for key, value in flags.items() if value is not None})


def _say_model_missing(exc: Exception, command: str) -> None:
    """The loader's message, and how to try `command` on the demo's tiny checkpoint instead of real weights."""
    print(f"error: {exc}{_demo_hint(command)}", file=sys.stderr)


def _demo_hint(command: str) -> str:
    tiny = get_settings().tiny_checkpoint
    return (f"\nTo try Quire without the real weights: `quire demo` writes a tiny random checkpoint to {tiny}; then "
            f"`{command.format(tiny=tiny)}` (its text is not meaningful).")


class _Console:
    """What `quire process` says on stderr: one line per file, in input order, however the files complete; on a
    terminal, a progress bar of the first file not yet reported, redrawn as its pages finish."""

    WIDTH = 24

    def __init__(self, names: list[str]) -> None:
        self.names, self.started = names, time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.pages = [0] * len(names)
        self.lines: dict[int, str] = {}  # reports of files done before the ones ahead of them
        self.next = 0

    def page(self, position: int, page_count: int) -> None:
        self.pages[position] += 1
        if self.tty and position == self.next:
            filled = self.WIDTH * self.pages[position] // max(1, page_count)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            print(f"\r{self._label(position)} [{bar}] {self.pages[position]}/{page_count} pages "
                  f"{time.perf_counter() - self.started:.1f}s", end="", file=sys.stderr, flush=True)

    def done(self, position: int, summary: str, total_ms: float | None) -> None:
        seconds = total_ms / 1000.0 if total_ms is not None else time.perf_counter() - self.started
        self.lines[position] = f"{self._label(position)}: {summary} ({seconds:.1f}s)"
        while self.next in self.lines:
            end = "\r" if self.tty else ""
            print(f"{end}{self.lines.pop(self.next)}" + " " * 8, file=sys.stderr)
            self.next += 1

    def _label(self, position: int) -> str:
        return f"[{position + 1}/{len(self.names)}] {self.names[position]}"


def _add_service_parsers(commands: argparse._SubParsersAction) -> None:
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
    _add_quantization_flag(serve)
    worker = commands.add_parser("worker", help="a Celery worker of the distributed mode (needs QUIRE_BROKER_URL)")
    worker.add_argument("--queues", default="cpu,gpu", help="cpu, gpu or both (default: cpu,gpu)")
    worker.add_argument("--concurrency", type=int, default=None,
                        help="tasks at once (default: the CPU count for cpu; for gpu QUIRE_GPU_THREADS, else enough "
                             "pages to fill the engine's batch: 64 on CUDA, 8 on a CPU)")
    worker.add_argument("--loglevel", default="INFO")
    worker.add_argument("--model", default=None, help="a gpu worker's local directory or hub id (default: QUIRE_MODEL)")
    _add_quantization_flag(worker)


def _serve(args: argparse.Namespace) -> int:
    """`quire serve`: the API, with in-process workers and a resident engine unless a broker is configured; either
    way the API and the stages share one Context (pipeline/jobs/context.py `open_context`)."""
    import uvicorn

    from api.app import create_app
    from api.auth import keys_required, startup_notice

    from .db.migrate import upgrade_to_head
    from .jobs.context import open_context

    settings = _settings(model=args.model, quantization=args.quantization)
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
    from workers.embedded import EmbeddedWorkers
    from workers.engine_host import EngineHost

    from .documents.lazy_recognizer import NO_MODEL
    from .engine.model.loader import named_directory
    from .engine_settings import gpu_threads

    if settings.model != NO_MODEL:  # a typo in a model path stops the service at once (exit 2)
        named_directory(settings.model)
    host = EngineHost(settings)
    workers = EmbeddedWorkers(settings, host, settings.cpu_threads, gpu_threads(settings))
    try:
        _load_models(workers, host)
        workers.resume()
        uvicorn.run(create_app(workers.context, require_keys), host=args.host, port=args.port, log_config=None)
    finally:
        workers.close()
        host.close()
    return 0


def _load_models(workers: EmbeddedWorkers, host: EngineHost) -> None:
    """Load the layout model, then the engine (whose KV cache takes a share of the GPU memory left), at start
    rather than on the first page. Without a model (none asked for, or not on this machine) the service runs as
    `quire process` does, saying so once: regions that need one are skipped with the reason. A model there but
    broken raises CheckpointError (main reports it: exit 2)."""
    workers.context.preload_layout()
    unavailable = host.load()
    if unavailable is not None:
        logging.getLogger("quire").warning(f"{unavailable} Serving without a recognition model: regions that need "
                                           "one are skipped, with the reason", extra={"code": unavailable.code})


def _worker(args: argparse.Namespace) -> int:
    """`quire worker`: Celery on the given queues; threads when it serves gpu, so its tasks share one engine."""
    for name, value in (("QUIRE_MODEL", args.model), ("QUIRE_QUANTIZATION", args.quantization)):
        if value:  # the tasks read their settings from the environment (workers/tasks.py)
            os.environ[name] = value
    settings = get_settings()
    if not settings.broker_url:
        print("error: QUIRE_BROKER_URL is not set; `quire serve` alone runs the embedded mode", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, args.loglevel)
    from .blob_url import open_blob_store
    from .db.migrate import upgrade_to_head
    from .engine_settings import gpu_threads

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
    from .engine.entrypoints.openai_server import openai_app
    from .engine_settings import engine_kwargs

    settings = _settings(device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                         quantization=args.quantization)
    model = args.model or settings.model
    engine = Engine.from_pretrained(model, **engine_kwargs(settings))
    app = openai_app(engine, args.served_model_name or str(model), default_max_tokens=settings.max_tokens)
    try:
        uvicorn.run(app, host=args.host, port=args.port)
    finally:
        engine.close()
    return 0


def _demo(args: argparse.Namespace) -> int:
    """`quire demo`: a generated sample PDF through the document pipeline; 0 when it succeeded."""
    from .demo import run_demo

    document = run_demo(get_settings(), args.checkpoint, args.max_tokens)
    return 0 if document.status == "succeeded" else 1


def _recognize(args: argparse.Namespace) -> int:
    """`quire recognize`: one JSON line per image; 1 when any input was not an image (documents go to process)."""
    from .engine.engine import Engine
    from .engine_settings import engine_kwargs, task_max_tokens

    settings = _settings(quantization=args.quantization)
    started = time.perf_counter()
    engine = Engine.from_pretrained(args.model or settings.model, **engine_kwargs(settings))
    loaded = time.perf_counter()
    max_tokens = task_max_tokens(settings, args.max_tokens)[args.task]
    recognized = [_recognize_one(engine, path, args.task, max_tokens) for path in args.images]
    print(f"load {loaded - started:.2f}s, total {time.perf_counter() - started:.2f}s", file=sys.stderr)
    return 0 if all(recognized) else 1


def _recognize_one(engine: Engine, path: Path, task: str, max_tokens: int) -> bool:
    """Print one image's result (or its error) as a JSON line; False when it was not an image."""
    from .documents.ingest import sniff
    from .engine.images import ImageError
    from .engine.prompts import TASK_PROMPTS
    from .engine.request import Request

    data = path.read_bytes()
    try:
        if sniff(data) == "application/pdf":
            raise ImageError("not_an_image", "a PDF document, not an image")
        out = engine.generate([Request(TASK_PROMPTS[task], [data], max_tokens=max_tokens)])[0]
    except ImageError as exc:
        print(json.dumps({"image": str(path), "error": exc.code, "message": str(exc)}))
        reason = str(exc).removeprefix(f"{exc.code}: ")
        print(f"error: {path}: {reason}; `quire recognize` takes images (one region or page each), `quire process "
              f"{path}` reads documents (PDF, TIFF, scans) into Markdown and JSON", file=sys.stderr)
        return False
    print(json.dumps({"image": str(path), "text": out.text, "finish_reason": out.finish_reason,
                      "prompt_tokens": out.prompt_tokens, "generated_tokens": out.generated_tokens,
                      "ttft_ms": round(out.ttft_s * 1000, 1), "tpot_ms": round(out.tpot_s * 1000, 2)},
                     ensure_ascii=False))
    return True

if __name__ == "__main__":
    sys.exit(main())
