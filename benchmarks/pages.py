"""Pages per second as a user gets them: documents through `DocumentProcessor.process_many`, what `quire process`
runs, outputs written (Markdown, JSON, page images and overlays) into a temporary directory.

The corpus is `../shared/corpus` (or tests/fixtures/corpus) plus `--generated` documents of `--generated-pages`
pages each (three paragraphs a page, none like another), or the PATHS given; `--split` cuts every document into
one-page PDFs first, the same pages as many small files. Every page, through `--layout` (default `pdf`;
`pp-doclayout` with the layout model's real shape and random weights where no weights are on the machine), every
text region through the model unless `--text-layer auto`.

The model is `--model` (a checkpoint directory, or `none`), else random weights at `--shape tiny` (a tiny checkpoint
written on the fly) or `--shape real` (the 0.9B shape, built in memory on `--device`). Random weights say nothing
sensible and seldom stop, so each region generates what a real one would: as many tokens as its own text layer holds
in the checkpoint's tokenizer (at least 8), EOS ignored; a region with no text layer (a scan) takes
`--fixed-budget`. `engine_alone_s` replays the same requests (the same crops, cut to the model's grid, and budgets)
into a fresh engine all at once, through its loop as in the run, and `pipeline_efficiency = engine_alone_s /
wall_s`: 1.0 is a pipeline that never keeps the engine waiting.

The last line is one JSON object: pages, regions, model_regions, output_tokens, wall_s, pages_per_s, output_tok_s,
engine_busy_share, mean_running_seqs, max_num_seqs, engine_alone_s, pipeline_efficiency, first_page_s (from the call
to the first finished page), import_s (importing the pipeline and the engine), workers_start_s (the page workers'
start, which a long run pays once, before the clock), and the run's settings. `--service` also runs the corpus
through the embedded service (`quire serve`, upload and poll) and through process_many with the same plain settings
(no budgets: each region as the service runs it, up to `--max-tokens`), and reports both pages/s and their ratio
under `service`.

`--pairs N --against KEY=VALUE` runs this command and the same with one option changed (`workers=2`, `split=1`),
interleaved A B A B in fresh processes, and prints each run, the ratio of each pair's pages/s and their median.

    .venv/bin/python -m benchmarks.pages [PATHS ...] [--layout pdf] [--text-layer off] [--shape tiny] [--workers N]
    .venv/bin/python -m benchmarks.pages --model none --text-layer auto --workers 1 --pairs 3 --against workers=2

Imports stay inside functions: each page worker imports this module again (`spawn`), and must stay light.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPORA = (ROOT.parent / "shared" / "corpus", ROOT / "tests" / "fixtures" / "corpus")
PASSWORD = "openpassword"  # libreoffice-writer-password.pdf's user password (corpus README)


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parse.add_argument("paths", nargs="*", type=Path, help="documents (default: the shared corpus and generated ones)")
    parse.add_argument("--generated", type=int, default=2, help="generated documents added to the corpus")
    parse.add_argument("--generated-pages", type=int, default=10)
    parse.add_argument("--no-corpus", action="store_true", help="the generated documents alone")
    parse.add_argument("--split", type=int, default=0, help="1: every document as one-page PDFs")
    parse.add_argument("--layout", default="pdf", choices=["pdf", "pp-doclayout", "page", "auto"])
    parse.add_argument("--text-layer", default="off", choices=["off", "auto"])
    parse.add_argument("--model", default=None, help="checkpoint directory, or none (default: --shape)")
    parse.add_argument("--shape", default="tiny", choices=["tiny", "real"])
    parse.add_argument("--device", default="cpu")
    parse.add_argument("--dtype", default="auto")
    parse.add_argument("--dpi", type=int, default=200)
    parse.add_argument("--workers", type=int, default=None, help="page worker processes (default: as quire process)")
    parse.add_argument("--fixed-budget", type=int, default=64, help="tokens of a region with no text layer")
    parse.add_argument("--max-tokens", type=int, default=64, help="--service: tokens per region at most")
    parse.add_argument("--no-write", action="store_true", help="process without writing the outputs")
    parse.add_argument("--small", action="store_true", help="a smoke run: tiny model, two small documents")
    parse.add_argument("--service", action="store_true", help="also through the embedded service")
    parse.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parse.add_argument("--pairs", type=int, default=0, help="with --against: A B pairs in fresh processes")
    parse.add_argument("--against", default=None, help="KEY=VALUE: the option B changes (e.g. workers=2)")
    return parse


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.pairs:
        result = paired(sys.argv[1:] if argv is None else argv, args)
    else:
        with tempfile.TemporaryDirectory(prefix="quire-pages-") as directory:
            result = measure(args, Path(directory))
    print(json.dumps(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return 0


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One run of the corpus through process_many (and the service, with --service): its figures."""
    started = time.perf_counter()
    import pipeline.documents_api  # noqa: F401  # timed: what `quire process` imports before its first page
    import pipeline.engine.engine  # noqa: F401

    import_s = time.perf_counter() - started
    if args.small:
        args.generated, args.generated_pages, args.no_corpus, args.dpi = 2, 2, True, 72
    paths = corpus(args, tmp)
    bench = Bench(args, tmp)
    try:
        figures = bench.pages(paths) | {"import_s": round(import_s, 3)}
        if args.service:
            figures["service"] = bench.service(paths)
    finally:
        bench.close()
    return figures


def corpus(args: argparse.Namespace, tmp: Path) -> list[Path]:
    """The documents of the run, written under `tmp` where they are generated or split."""
    from benchmarks.workload import generated_pdf

    paths = list(args.paths)
    if not paths and not args.no_corpus:
        shared = next((folder for folder in CORPORA if folder.is_dir()), None)
        paths = sorted(shared.glob("*.pdf")) if shared else []
    (tmp / "corpus").mkdir()
    for number in range(args.generated):
        path = tmp / "corpus" / f"generated-{number}.pdf"
        path.write_bytes(generated_pdf(f"generated {number}", pages=args.generated_pages))
        paths.append(path)
    return split_pages(paths, tmp / "split") if args.split else paths


def split_pages(paths: list[Path], folder: Path) -> list[Path]:
    """Each PDF's pages as one-page PDFs (documents that do not open are kept whole, to fail as they would)."""
    import pymupdf

    folder.mkdir()
    pieces = []
    for path in paths:
        try:
            source = pymupdf.open(path)
            if source.needs_pass:
                source.authenticate(PASSWORD)
        except Exception:  # not a PDF PyMuPDF opens: it goes in as it is
            pieces.append(path)
            continue
        with source:
            for index in range(source.page_count):
                page = pymupdf.open()
                page.insert_pdf(source, from_page=index, to_page=index)
                pieces.append(folder / f"{path.stem}-p{index + 1:04d}.pdf")
                page.save(pieces[-1])
                page.close()
    return pieces


class Bench:
    """The settings, the model and the engine of a run."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        from pipeline.config import Settings

        self.args, self.tmp = args, tmp
        self.engine, self.model = self._engine()
        if self.engine is not None:
            warm_up(self.engine)
        layout_model = self._layout_model() if args.layout in ("pp-doclayout", "auto") else None
        values = {"model": self.model, "layout": args.layout, "text_layer": args.text_layer, "dpi": args.dpi,
                  "device": args.device, "dtype": args.dtype, "cache_dir": tmp / "cache"}
        if layout_model is not None:
            values["layout_model"] = layout_model
        self.settings = Settings(**values)

    def pages(self, paths: list[Path]) -> dict[str, Any]:
        """process_many over the corpus with realistic budgets, then the same requests into a fresh engine."""
        from pipeline.documents_api import DocumentProcessor

        recognizer = self._budgets(paths) if self.engine is not None else None
        processor = DocumentProcessor(self.settings, self.engine, password=PASSWORD, workers=self.args.workers,
                                      page_images=not self.args.no_write, recognizer=recognizer)
        with processor:
            started = time.perf_counter()
            processor.start_workers()
            workers_start = time.perf_counter() - started
            figures = self._timed(processor, paths) | {"workers_start_s": round(workers_start, 3)}
        if recognizer is not None:
            figures |= self._replay(recognizer.requests, figures["wall_s"])
        return figures | self._describe(processor)

    def service(self, paths: list[Path]) -> dict[str, Any]:
        """The corpus through the embedded service and through process_many with the same plain settings (each
        region up to --max-tokens, as the service runs it; no password, as an upload has none)."""
        from benchmarks.pages_service import embedded_pages_per_s
        from pipeline.documents_api import DocumentProcessor

        plain = self.settings.model_copy(update={"max_tokens": self.args.max_tokens})
        with DocumentProcessor(plain, self.engine, workers=self.args.workers, page_images=True) as processor:
            processor.start_workers()
            in_process = self._timed(processor, paths)
        served = embedded_pages_per_s(paths, plain, self.tmp / "service")
        return {"process_pages_per_s": in_process["pages_per_s"], "service_pages_per_s": served["pages_per_s"],
                "service_over_process": round(served["pages_per_s"] / in_process["pages_per_s"], 3), **served}

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

    def _timed(self, processor: Any, paths: list[Path]) -> dict[str, Any]:
        from pipeline.documents.outputs import DocumentWriter

        writers: dict[int, DocumentWriter] = {}
        first: list[float] = []
        output = self.tmp / f"out-{time.monotonic_ns()}"

        def on_page(position: int, finished: Any) -> None:
            if not first:
                first.append(time.perf_counter())
            if not self.args.no_write:
                if position not in writers:
                    writers[position] = DocumentWriter(output, paths[position].stem)
                    writers[position].start()
                writers[position].page(finished)

        before = self.engine.stats() if self.engine is not None else {}
        started = time.perf_counter()
        documents = []
        for position, document in processor.process_many(paths, on_page):
            documents.append(document)
            if not self.args.no_write:
                writer = writers.pop(position, None) or DocumentWriter(output, paths[position].stem)
                writer.finish(document)
        wall = time.perf_counter() - started
        return _counts(documents, wall, first[0] - started if first else None) | self._engine_figures(before, wall)

    def _engine_figures(self, before: dict[str, int], wall: float) -> dict[str, Any]:
        if self.engine is None:
            return {"engine_busy_share": None, "mean_running_seqs": None, "max_num_seqs": None}
        after = self.engine.stats()
        steps = after["steps"] - before["steps"]
        return {"engine_busy_share": round((after["busy_ms"] - before["busy_ms"]) / 1000 / wall, 3),
                "mean_running_seqs": round((after["step_sequences"] - before["step_sequences"]) / max(1, steps), 1),
                "max_num_seqs": self.engine.config.max_num_seqs}

    def _budgets(self, paths: list[Path]) -> Any:
        from benchmarks.pages_budgets import BudgetedRecognizer, region_budgets
        from pipeline.document_settings import process_options
        from pipeline.documents.layout import layout_backend
        from pipeline.engine_settings import layout_device

        layout = layout_backend(self.settings.layout, self.settings.layout_model, layout_device(self.settings))
        options = process_options(self.settings, password=PASSWORD)
        budgets = region_budgets(paths, layout, options, self.engine.processor.tokenizer, self.args.fixed_budget)
        return BudgetedRecognizer(self.engine, budgets, self.args.fixed_budget)

    def _replay(self, requests: list[Any], wall: float) -> dict[str, Any]:
        """The run's requests into a fresh engine (new caches, the same weights), all at once."""
        from benchmarks.engines import release
        from pipeline.engine.engine import Engine

        model, processor, config = self.engine.model, self.engine.processor, self.engine.config
        release(self.engine)
        self.engine = Engine(model, processor, config)
        warm_up(self.engine)
        before = self.engine.stats()
        started = time.perf_counter()
        for pending in [self.engine.submit(request) for request in requests]:
            pending.result()
        alone = time.perf_counter() - started
        after = self.engine.stats()
        batch = (after["step_sequences"] - before["step_sequences"]) / max(1, after["steps"] - before["steps"])
        return {"engine_alone_s": round(alone, 3), "pipeline_efficiency": round(alone / wall, 3),
                "alone_mean_running_seqs": round(batch, 1)}

    def _describe(self, processor: Any) -> dict[str, Any]:
        return {"workers": processor.workers, "layout": self.args.layout, "text_layer": self.args.text_layer,
                "model": self.model if self.args.model else f"random {self.args.shape}", "device": self.args.device,
                "dtype": str(self.engine.model.dtype).removeprefix("torch.") if self.engine else None,
                "split": bool(self.args.split), "dpi": self.args.dpi}

    def _engine(self) -> tuple[Any, str]:
        """The engine of the run (None for --model none) and the model's name for the settings."""
        from pipeline.engine.core import EngineConfig
        from pipeline.engine.engine import Engine

        if self.args.model == "none":
            return None, "none"
        config = EngineConfig(device=self.args.device, dtype=self.args.dtype,
                              kv_cache_memory=(16 << 30) if self.args.device.startswith("cuda") else None)
        if self.args.model is not None:
            return Engine.from_pretrained(self.args.model, **vars(config)), self.args.model
        from pipeline.samples.tiny_checkpoint import write_tiny_checkpoint

        tiny = write_tiny_checkpoint(self.tmp / "tiny")
        if self.args.shape == "tiny":
            return Engine.from_pretrained(tiny, **vars(config)), str(tiny)
        return real_shape_engine(tiny, config), str(tiny)

    def _layout_model(self) -> str:
        """The layout weights: the settings' when on this machine, else the real shape with random weights."""
        from pipeline.config import Settings
        from pipeline.documents.layout_weights import local_layout_weights
        from pipeline.documents.tiny_layout import write_real_shape_layout_checkpoint, write_tiny_layout_checkpoint

        wanted = Settings().layout_model
        if local_layout_weights(wanted) is not None:
            return wanted
        if self.args.small:
            return str(write_tiny_layout_checkpoint(self.tmp / "layout"))
        return str(write_real_shape_layout_checkpoint(self.tmp / "layout"))


def warm_up(engine: Any) -> None:
    """One small request, through the engine's loop as every request of a run: the first steps of an engine
    allocate its cache and compile, which no run should pay. (Not `generate`, which steps in this thread: a thread
    that has run torch's parallel work keeps an OpenMP pool, and another thread's pool then ran 35-55 % slower here.)
    """
    from pipeline.engine.request import Request
    from pipeline.samples.sample_image import sample_image

    engine.submit(Request(images=[sample_image(256, 64)], max_tokens=4, ignore_eos=True)).result()


def real_shape_engine(tiny: Path, config: Any) -> Any:
    """The 0.9B shape with random weights made on the device, with the tiny checkpoint's tokenizer and template."""
    import torch

    from benchmarks.engines import random_model
    from pipeline.engine.devices import resolve_device, resolve_dtype
    from pipeline.engine.engine import Engine
    from pipeline.engine.model.checkpoint_config import ModelConfig
    from pipeline.engine.processor import Processor

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    model = random_model(ModelConfig(), torch.device(device), dtype)
    return Engine(model, Processor.from_pretrained(tiny), config)


def _counts(documents: list[Any], wall: float, first_page: float | None) -> dict[str, Any]:
    pages = sum(len(document.pages) for document in documents)
    regions = [region for document in documents for page in document.pages for region in page.regions]
    tokens = sum(region.usage.generated_tokens for region in regions)
    return {"documents": len(documents), "pages": pages, "regions": len(regions),
            "model_regions": sum(region.source == "model" for region in regions), "output_tokens": tokens,
            "wall_s": round(wall, 3), "pages_per_s": round(pages / wall, 3), "output_tok_s": round(tokens / wall, 1),
            "first_page_s": None if first_page is None else round(first_page, 3),
            "failed_documents": sum(document.status == "failed" for document in documents)}


def paired(argv: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """A and B interleaved in fresh processes, `args.pairs` times; each run's JSON and the median B/A ratio."""
    key, _, value = (args.against or "").partition("=")
    if not key or not value:
        raise SystemExit("--pairs needs --against KEY=VALUE")
    base = _without(argv, ("--pairs", "--against", "--out"))
    variant = _without(base, (f"--{key.replace('_', '-')}",)) + [f"--{key.replace('_', '-')}", value]
    runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for _ in range(args.pairs):
        runs.append((_run(base), _run(variant)))
        print(json.dumps({"a": runs[-1][0], "b": runs[-1][1]}), file=sys.stderr)
    ratios = [round(b["pages_per_s"] / a["pages_per_s"], 3) for a, b in runs]
    return {"against": args.against, "pages_per_s_ratios": ratios, "median_ratio": statistics.median(ratios),
            "a_pages_per_s": [a["pages_per_s"] for a, _ in runs], "b_pages_per_s": [b["pages_per_s"] for _, b in runs],
            "a_efficiency": [a.get("pipeline_efficiency") for a, _ in runs],
            "b_efficiency": [b.get("pipeline_efficiency") for _, b in runs]}


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """argv less each of `options` and its value."""
    kept, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item in options:
            skip = True
        elif not any(item.startswith(f"{option}=") for option in options):
            kept.append(item)
    return kept


def _run(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.pages", *argv], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmarks.pages {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
