"""`quire process`: documents (files, or every document in a directory) to NAME.md, NAME.json and NAME.pages/, many
through one engine, with a line per file on the console."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.common import add_quantization_flag, say_model_missing, settings_from_flags
from pipeline.config import DPI_MAX, DPI_MIN, get_settings

if TYPE_CHECKING:
    from pipeline.documents.lazy_recognizer import ModelUnavailable
    from pipeline.documents.page_ranges import PageRanges
    from pipeline.documents.process import FinishedPage
    from pipeline.documents_api import DocumentProcessor


def add_process_parser(commands: argparse._SubParsersAction) -> None:
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
    add_quantization_flag(process)
    process.add_argument("--charts", action="store_true", default=settings.recognize_charts,
                         help="recognise charts (Chart Recognition:) instead of keeping them as pictures")
    process.add_argument("--seals", action="store_true", default=settings.recognize_seals,
                         help="recognise seals (Seal Recognition:) instead of keeping them as pictures")
    process.add_argument("--force", action="store_true", help="redo inputs whose output already exists")


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
    from pipeline.documents.page_ranges import parse_page_ranges

    try:
        return parse_page_ranges(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def process(args: argparse.Namespace) -> int:
    """`quire process`: 0 when every input has a result, 1 when any input failed, 2 when the layout model is missing
    or the recognition model is there but broken, 3 when every input has a result but regions that need the model
    were skipped for want of one (`--model none`, or it is not on this machine)."""
    from pipeline.documents.layout_weights import LayoutModelUnavailable
    from pipeline.documents.lazy_recognizer import ABSENT, NO_MODEL
    from pipeline.documents_api import DocumentProcessor
    from pipeline.engine.model.loader import named_directory

    settings = settings_from_flags(device=args.device, model=args.model, layout=args.layout,
                                   layout_model=args.layout_model, dpi=args.dpi, text_layer=args.text_layer,
                                   recognize_charts=args.charts, recognize_seals=args.seals,
                                   quantization=args.quantization)
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
    from pipeline.documents.outputs import output_names

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
    from pipeline.documents.process import scan_directory
    from pipeline.documents.summary import plural

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
    from pipeline.documents.outputs import DocumentWriter
    from pipeline.documents.summary import summary_line

    failed = skipped = 0
    said_unavailable = False
    writers: dict[int, DocumentWriter] = {}
    console = Console([path.name for path in todo])

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
        say_model_missing(unavailable, "quire process FILE --model {tiny}")
    else:
        print(f"error: {unavailable}", file=sys.stderr)
    print("Meanwhile regions that need the model are skipped; the text layer's are done (`--model none` skips "
          "them without trying).", file=sys.stderr)


class Console:
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
