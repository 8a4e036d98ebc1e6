"""End to end: the same documents through (a) `quire process` in this process and (b) the distributed service.

The documents are `--documents` generated PDFs of `--pages` pages, three distinct paragraphs a page (every
paragraph a region and an engine request, none answered from a cache). Both sides run the service tests' fast
settings (tests/local_stack.py FAST: 40 dpi, the `pdf` layout, no text layer, 4 tokens a region) on the same model
(a tiny checkpoint unless `--model`), after a warm-up of `--warmup` other documents that loads the engine.

(a) is `quire process`'s single-process path (QUIRE_PROCESS_WORKERS=0): one engine in this process, each file through
process_file, its pages rendered in this thread while the engine works, the outputs written by a DocumentWriter.
(benchmarks/pages.py measures the default path, page workers in processes; this one compares the service with the
pipeline in one process, as both stood when the service's overhead target was set.) (b) uploads
every document at once from `--clients` clients to `quire serve` with a CPU and a GPU worker (benchmarks/stack.py),
pages prepared on the queue `--prepare-queue` names; its wall time runs from the first upload to the last document's
`finished_at`.

For each: pages/s and regions/s over the wall time; engine_busy_share, the engine's busy time (Engine.stats()
busy_ms, the time spent in step(); read in (b) from the GPU worker's metrics port) over the same wall time.

overhead_ms_per_region, (b) only: (wall_b - wall_a) / regions, in ms. What the distributed service costs per region
beyond the in-process pipeline on the same documents, settings, engine and machine: the HTTP upload, Postgres rows
and status updates, Redis messages, page images written to and read back from the blob store, and any time the
engine waits on the queue. It is measured, not modelled, so it also carries the noise of a shared machine, and it
can come out negative where the stack's extra processes find cores that (a) leaves idle.
cpu_overhead_ms_per_region: the same difference in CPU time: (CPU seconds of the stack's processes, their
children and its redis-server) - (CPU seconds of this process during (a)), per region. Postgres's own CPU is not
in it (its server is shared; its backends are not ours to count).

stage_ms_per_region, (b) only: how long the workers' tasks of each stage ran (the `duration_ms` they log), summed
and divided by the regions; `recognize` includes the time a page's regions wait in the engine behind others.
stage_cpu_ms_per_region: the same for the CPU time the tasks' threads spent (`cpu_ms`); the engine's loop is not in
`recognize`'s, the image preprocessing of its requests is.

This 2-core machine swings by tens of percent from run to run, so the two sides run interleaved: `--pairs` rounds of
(a) then (b), each round on documents of its own (none seen before by either side's caches), with (a)'s engine and
(b)'s stack loaded once. The pair with the median overhead is reported; every pair's overhead is listed.

`--blob s3` runs a second stack beside (b), the same but for its blobs in an S3 bucket (`--blob-url`, default
QUIRE_BLOB_URL; the endpoint and credentials from the AWS_* variables; under a prefix of its own, removed at the
end): each round then gives every file to both stacks after (a), and the S3 stack's median figures, with its
overhead per region over the same (a) beside the local store's, are under `s3`. The difference between the two is
what keeping page images and results in the bucket costs per region (issue 32: no target; a figure for operators).

Targets (issue 8): overhead_ms_per_region < 5, engine_busy_share >= 0.8 in (b). The last line is one JSON object:
the median pair's (b) figures at the top level, its (a) figures under `in_process`, the ratios b/a under `ratios`,
whether each target is met under `targets_met`, and each pair's overhead under `overhead_ms_per_region_pairs`.

    .venv/bin/python -m benchmarks.service_overhead [--documents 20] [--pages 5] [--pairs 3] [--model DIR]
        [--blob s3 --blob-url s3://bucket/prefix]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.stack import Stack, distributed_stack, exit_on_sigterm
from benchmarks.workload import finished_at, generated_pdf, page_errors, result_counts, upload_all, wait_until_final
from pipeline.config import Settings
from pipeline.engine_settings import engine_kwargs, gpu_threads, layout_device
from tests.local_stack import FAST

BUSY_TARGET, OVERHEAD_TARGET_MS = 0.8, 5.0


def fast_settings(model: Path) -> Settings:
    """The settings (b)'s processes read from FAST, for (a)."""
    return Settings.model_validate({key.removeprefix("QUIRE_").lower(): value for key, value in FAST.items()}
                                   | {"model": str(model)})


def documents(label: str, count: int, pages: int) -> list[tuple[str, bytes]]:
    return [(f"{label}-{i}.pdf", generated_pdf(f"{label} document {i}", pages=pages)) for i in range(count)]


class InProcess:
    """(a): files through one in-process engine, as `quire process` runs them without page workers; the engine is
    loaded once and kept between rounds."""

    def __init__(self, model: Path, root: Path) -> None:
        from pipeline.document_settings import process_options
        from pipeline.documents.layout import layout_backend
        from pipeline.documents.recognizer import EngineRecognizer
        from pipeline.engine.engine import Engine

        self.model, self.root = model, root
        self.settings = fast_settings(model)
        self.layout = layout_backend(self.settings.layout, self.settings.layout_model, layout_device(self.settings))
        self.options = replace(process_options(self.settings), page_images=True)
        self.engine = Engine.from_pretrained(self.settings.model, **engine_kwargs(self.settings))
        self.recognizer = EngineRecognizer(self.engine, self.settings.max_tokens)
        (root / "inputs").mkdir()

    def run(self, files: list[tuple[str, bytes]]) -> tuple[int, int]:
        """Process the files one after another; (pages, regions recognised by the model)."""
        from pipeline.documents.outputs import DocumentWriter
        from pipeline.documents.stream import process_file

        pages = regions = 0
        for name, data in files:
            path = self.root / "inputs" / name
            path.write_bytes(data)
            writer = DocumentWriter(self.root / "outputs", path.stem)
            writer.start()
            document = process_file(path, self.recognizer, self.layout, self.options, writer.page,
                                    model=str(self.model))
            writer.finish(document)
            if document.status != "succeeded":
                raise RuntimeError(f"(a): {name} ended {document.status}: {document.error}")
            pages += len(document.pages)
            regions += sum(region.source == "model" for page in document.pages for region in page.regions)
        return pages, regions

    def round(self, files: list[tuple[str, bytes]]) -> dict[str, Any]:
        """One measured round: the files' figures."""
        busy, cpu, started = self.engine.stats()["busy_ms"], time.process_time(), time.perf_counter()
        pages, regions = self.run(files)
        wall = time.perf_counter() - started
        return _figures(pages, regions, wall, (self.engine.stats()["busy_ms"] - busy) / 1000,
                        time.process_time() - cpu)

    def close(self) -> None:
        self.engine.close()


def warm_up(stack: Stack, files: list[tuple[str, bytes]], clients: int) -> None:
    """(b)'s warm-up: the files through the stack, which loads the GPU worker's engine."""
    warm = upload_all(stack.url, files, clients)
    _require_succeeded(stack, wait_until_final(stack.url, [u.document_id for u in warm], timeout_s=300))


def distributed(stack: Stack, measured: list[tuple[str, bytes]], clients: int) -> dict[str, Any]:
    """(b): every file uploaded at once to the running stack; its figures."""
    busy, cpu, started = stack.engine_stats()["busy_ms"], stack.cpu_s(), time.time()
    uploads = upload_all(stack.url, measured, clients)
    summaries = wait_until_final(stack.url, [u.document_id for u in uploads], timeout_s=120 + 5 * len(measured))
    wall = max(finished_at(summary) for summary in summaries.values()) - started
    busy_s, cpu_s = (stack.engine_stats()["busy_ms"] - busy) / 1000, stack.cpu_s() - cpu
    _require_succeeded(stack, summaries)
    counts = [result_counts(stack.url, document_id) for document_id in summaries]
    regions = sum(r for _, r in counts)
    figures = _figures(sum(p for p, _ in counts), regions, wall, busy_s, cpu_s)
    per_region = {f"stage_{name}_per_region": {stage: round(ms / regions, 2) for stage, ms in
                                               sorted(stack.stage_ms(started, field).items())}
                  for name, field in (("ms", "duration_ms"), ("cpu_ms", "cpu_ms"))}
    return figures | per_region


def _require_succeeded(stack: Stack, summaries: dict[str, dict]) -> None:
    failed = [f"{s['filename']}: {s['status']} {s['error']} {page_errors(stack.url, i)[:3]}"
              for i, s in summaries.items() if s["status"] != "succeeded"]
    if failed:
        raise RuntimeError(f"(b): {len(failed)} documents did not succeed: {failed[:5]}\n{stack.tail()}")


def _figures(pages: int, regions: int, wall_s: float, busy_s: float, cpu_s: float) -> dict[str, Any]:
    return {"pages": pages, "regions": regions, "wall_s": round(wall_s, 3),
            "pages_per_s": round(pages / wall_s, 2), "regions_per_s": round(regions / wall_s, 2),
            "engine_busy_share": round(busy_s / wall_s, 3), "cpu_ms_per_region": round(1000 * cpu_s / regions, 2)}


def report(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """(b)'s figures, its overheads over (a), (a)'s figures, the ratios b/a and the targets."""
    overhead = round(1000 * (b["wall_s"] - a["wall_s"]) / b["regions"], 2)
    cpu_overhead = round(b["cpu_ms_per_region"] - a["cpu_ms_per_region"], 2)
    ratios = {key: round(b[key] / a[key], 3) if a[key] else None
              for key in ("pages_per_s", "regions_per_s", "engine_busy_share", "cpu_ms_per_region")}
    return {**b, "overhead_ms_per_region": overhead, "cpu_overhead_ms_per_region": cpu_overhead, "in_process": a,
            "ratios": ratios, "targets_met": {"overhead_under_5_ms": overhead < OVERHEAD_TARGET_MS,
                                              "engine_busy_at_least_80_pct": b["engine_busy_share"] >= BUSY_TARGET}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--pages", type=int, default=5, help="pages per document (three regions each)")
    parser.add_argument("--warmup", type=int, default=2, help="documents run before timing, on each side")
    parser.add_argument("--pairs", type=int, default=3,
                        help="rounds of (a) then (b), each on documents of its own; the median pair is reported")
    parser.add_argument("--clients", type=int, default=4, help="concurrent uploads in (b)")
    parser.add_argument("--cpu-processes", type=int, default=2, help="the CPU worker's --concurrency in (b)")
    parser.add_argument("--gpu-threads", type=int, default=gpu_threads(Settings()),
                        help="the GPU worker's --concurrency in (b): pages whose regions share the engine at once")
    parser.add_argument("--prepare-queue", choices=("cpu", "gpu"), default="cpu",
                        help="QUIRE_PREPARE_QUEUE in (b): cpu (the default) prepares pages on the CPU worker and "
                             "sends them on by Redis; gpu on the GPU worker, which recognises each in the thread "
                             "that prepared it")
    parser.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: a tiny one)")
    parser.add_argument("--blob", choices=("local", "s3"), default="local",
                        help="s3: also run (b) with its blobs in S3, beside the local store")
    parser.add_argument("--blob-url", default=os.environ.get("QUIRE_BLOB_URL", ""),
                        help="the bucket for --blob s3: s3://bucket/prefix (default: QUIRE_BLOB_URL)")
    args = parser.parse_args()
    if args.blob == "s3" and not args.blob_url:
        parser.error("--blob s3 needs --blob-url s3://bucket/prefix (or QUIRE_BLOB_URL)")
    exit_on_sigterm()
    warmup = documents("warm-up", args.warmup, args.pages)
    rounds = [documents(f"bench{r}", args.documents, args.pages) for r in range(args.pairs)]
    with tempfile.TemporaryDirectory(prefix="quire-service-overhead-") as directory:
        root = Path(directory)
        model = args.model
        if model is None:
            from pipeline.samples.tiny_checkpoint import write_tiny_checkpoint

            model = write_tiny_checkpoint(root / "tiny-checkpoint")
        a_side = InProcess(model, root)
        try:
            a_side.run(warmup)
            with ExitStack() as running:
                stores = {"local": {}}
                if args.blob == "s3":
                    stores["s3"] = {"QUIRE_BLOB_URL": running.enter_context(own_prefix(args.blob_url))}
                stacks = {}
                for store, blob_settings in stores.items():
                    (root / f"stack-{store}").mkdir()
                    stacks[store] = running.enter_context(distributed_stack(
                        root / f"stack-{store}", model, args.cpu_processes, args.gpu_threads,
                        QUIRE_PREPARE_QUEUE=args.prepare_queue, **blob_settings))
                    warm_up(stacks[store], warmup, args.clients)
                rounds_by_store: dict[str, list[dict[str, Any]]] = {store: [] for store in stacks}
                for files in rounds:
                    a = a_side.round(files)
                    for store, stack in stacks.items():
                        rounds_by_store[store].append(report(a, distributed(stack, files, args.clients)))
        finally:
            a_side.close()
    figures = median_pair(rounds_by_store["local"])
    if "s3" in rounds_by_store:
        figures["s3"] = median_pair(rounds_by_store["s3"])
    overheads = figures["overhead_ms_per_region_pairs"]
    a, b = figures["in_process"], figures
    print(f"overhead per pair (ms/region): {overheads}; the median pair:")
    for label, side in (("(a) quire process", a), ("(b) distributed", b)):
        print(f"{label}: {side['pages']} pages, {side['regions']} regions in {side['wall_s']} s: "
              f"{side['pages_per_s']} pages/s, {side['regions_per_s']} regions/s, engine busy "
              f"{100 * side['engine_busy_share']:.1f}% of the wall time, {side['cpu_ms_per_region']} CPU ms/region")
    print(f"overhead of (b) over (a): {figures['overhead_ms_per_region']} ms/region wall (target < "
          f"{OVERHEAD_TARGET_MS}), {figures['cpu_overhead_ms_per_region']} CPU ms/region; targets met: "
          f"{figures['targets_met']}")
    if "s3" in figures:
        s3 = figures["s3"]
        print(f"with blobs in S3: {s3['overhead_ms_per_region']} ms/region wall over (a) (pairs "
              f"{s3['overhead_ms_per_region_pairs']}), {s3['cpu_overhead_ms_per_region']} CPU ms/region; the local "
              f"store's: {figures['overhead_ms_per_region']} ms/region")
    print(json.dumps(figures))
    return 0


def median_pair(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pair with the median overhead, with every pair's overhead listed."""
    figures = sorted(pairs, key=lambda pair: pair["overhead_ms_per_region"])[len(pairs) // 2]
    return figures | {"overhead_ms_per_region_pairs": [pair["overhead_ms_per_region"] for pair in pairs]}


@contextmanager
def own_prefix(url: str) -> Iterator[str]:
    """A prefix of this run's own under the bucket URL, its objects removed at the end (an existing bucket's other
    objects are never touched)."""
    from pipeline.s3_location import parse_s3_url
    from pipeline.s3_storage import S3BlobStore

    location = parse_s3_url(url)
    run_url = f"s3://{location.bucket}/{location.prefix}service-overhead-{uuid.uuid4().hex[:8]}"
    store = S3BlobStore(parse_s3_url(run_url))
    store.check()
    try:
        yield run_url
    finally:
        pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket,
                                                                        Prefix=store.location.prefix)
        for page in pages:
            for item in page.get("Contents", []):
                store.client.delete_object(Bucket=store.bucket, Key=item["Key"])


if __name__ == "__main__":
    sys.exit(main())
