"""Load on the distributed service: many small documents uploaded by many concurrent clients, and a leak check.

A distributed stack (benchmarks/stack.py) is started; a warm-up batch loads the GPU worker's engine and settles
its caches; then `--documents` one-page PDFs (three paragraphs each, every one distinct, so each is an engine
request) are uploaded by `--clients` concurrent clients. Every document must succeed. Batches of at most
`--documents` more follow until the engine has recognised at least `--min-requests` regions since the warm-up
(regions whose source is `model` in the results). The GPU worker's resident memory (VmRSS of the worker and every
process under it) is read after the warm-up and after each batch; growth from the first reading to the last of
`--max-growth` percent or more fails the run, as does any document that does not succeed.

Printed: upload latency p50/p99 (the POST, as a client sees it), documents/s over the first batch (from the
first upload to the last document's `finished_at`), the RSS readings and the growth. Last line: one JSON object
with every figure. The machine the figures come from matters: on a shared 2-core box they are noisy.

    PYTHONPATH=. .venv/bin/python -m benchmarks.load [--documents 200] [--clients 20] [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stack import Stack, distributed_stack, exit_on_sigterm, tree_rss_kib
from benchmarks.workload import (
    Uploaded,
    finished_at,
    generated_pdf,
    percentile,
    result_counts,
    upload_all,
    wait_until_final,
)

PARAGRAPHS = 3  # regions per generated page


def run_batch(stack: Stack, label: str, count: int, clients: int) -> tuple[list[Uploaded], dict[str, dict]]:
    """Upload `count` fresh documents and wait for all of them; their uploads and final summaries."""
    documents = [(f"{label}-{i}.pdf", generated_pdf(f"{label} document {i}", paragraphs=PARAGRAPHS))
                 for i in range(count)]
    uploads = upload_all(stack.url, documents, clients)
    return uploads, wait_until_final(stack.url, [u.document_id for u in uploads], timeout_s=120 + 3 * count)


def model_requests(stack: Stack, summaries: dict[str, dict]) -> int:
    """Regions the engine recognised in these documents."""
    return sum(result_counts(stack.url, document_id)[1] for document_id in summaries)


def failures(summaries: dict[str, dict]) -> list[str]:
    return [f"{summary['filename']}: {summary['status']} {summary['error']}" for summary in summaries.values()
            if summary["status"] != "succeeded"]


def measure(stack: Stack, args: argparse.Namespace) -> dict[str, object]:
    """Warm up, run the timed batch and any extra ones, and gather the figures."""
    gpu = stack.processes["gpu"].pid
    _, warm = run_batch(stack, "warm-up", args.warmup, args.clients)
    failed = failures(warm)
    rss_before = tree_rss_kib(gpu)
    started = time.time()
    uploads, summaries = run_batch(stack, "load", args.documents, args.clients)
    wall_s = max(finished_at(summary) for summary in summaries.values()) - started
    failed += failures(summaries)
    requests, batches = model_requests(stack, summaries), 0
    readings = [rss_before, tree_rss_kib(gpu)]
    while requests < args.min_requests and not failed:
        batches += 1
        extra = min(args.documents, math.ceil((args.min_requests - requests) / PARAGRAPHS))
        _, more = run_batch(stack, f"extra{batches}", extra, args.clients)
        failed += failures(more)
        requests += model_requests(stack, more)
        readings.append(tree_rss_kib(gpu))
    rss_after = readings[-1]
    latencies = [upload.latency_s * 1000 for upload in uploads]
    return {
        "documents": args.documents, "clients": args.clients, "failed": len(failed),
        "upload_p50_ms": round(percentile(latencies, 0.50), 1), "upload_p99_ms": round(percentile(latencies, 0.99), 1),
        "documents_per_s": round(args.documents / wall_s, 2), "wall_s": round(wall_s, 2),
        "engine_requests": requests, "extra_batches": batches,
        "gpu_rss_after_warmup_kib": rss_before, "gpu_rss_after_load_kib": rss_after,
        "gpu_rss_growth_pct": round(100 * (rss_after - rss_before) / rss_before, 2),
        "gpu_rss_per_batch_kib": readings,
        "failures": failed[:10]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=20, help="documents before the first RSS reading")
    parser.add_argument("--min-requests", type=int, default=500, help="engine requests after the warm-up")
    parser.add_argument("--max-growth", type=float, default=10.0, help="GPU worker RSS growth allowed, percent")
    parser.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: a tiny one)")
    args = parser.parse_args()
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="quire-load-") as root, distributed_stack(Path(root), args.model) as stack:
        figures = measure(stack, args)
    print(f"{figures['documents']} documents from {figures['clients']} clients: {figures['failed']} failed; "
          f"upload p50 {figures['upload_p50_ms']} ms, p99 {figures['upload_p99_ms']} ms; "
          f"{figures['documents_per_s']} documents/s over {figures['wall_s']} s")
    print(f"GPU worker RSS {figures['gpu_rss_after_warmup_kib']} KiB after the warm-up, "
          f"{figures['gpu_rss_after_load_kib']} KiB after {figures['engine_requests']} engine requests: "
          f"{figures['gpu_rss_growth_pct']}% (limit {args.max_growth}%)")
    print(json.dumps(figures))
    return 1 if figures["failed"] or figures["gpu_rss_growth_pct"] >= args.max_growth else 0


if __name__ == "__main__":
    sys.exit(main())
