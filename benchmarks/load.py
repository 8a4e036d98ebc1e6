"""Load on the distributed service: many small documents uploaded by many concurrent clients, and a leak check.

A distributed stack (benchmarks/stack.py) is started; a warm-up batch loads the GPU worker's engine and settles
its caches; then `--documents` one-page PDFs (three paragraphs each, every one distinct, so each is an engine
request) are uploaded by `--clients` concurrent clients. Every document must succeed. Batches of at most
`--documents` more follow until the engine has recognised at least `--min-requests` regions since the warm-up
(regions whose source is `model` in the results). The GPU worker's resident memory (VmRSS of the worker and every
process under it) is read after the warm-up and after each batch, once the worker has been idle long enough for its
engine's settled trim (host_memory.SETTLE_S), each reading printed as it is taken with the worker's mappings whose
resident memory moved 4 MiB or more since the last one (the main heap, a thread arena's heap, a library). The run
fails when a document does not succeed, when the growth from the first reading to the last is `--max-growth`
percent or more, or, once readings past `--steady-from` requests exist, when the steady state is not flat: growth
from the first reading at or past `--steady-from` requests to the last over `--max-steady-growth` percent, or a
slope over those readings (the median of the slopes between any two) above `--max-slope` KiB per 1,000 requests.
The first batches fill the engine's caches and the allocator's pools, so the total growth says little about a
worker that runs for weeks; the steady state does. `--soak` runs at least 20,000 requests (about 45 minutes on a
2-core machine).

Printed: upload latency p50/p99 (the POST, as a client sees it), documents/s over the first batch (from the
first upload to the last document's `finished_at`), the RSS readings, the growth and the steady state. Last
line: one JSON object with every figure. The machine the figures come from matters: on a shared 2-core box they
are noisy.

    PYTHONPATH=. .venv/bin/python -m benchmarks.load [--documents 200] [--clients 20] [--model DIR] [--soak]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stack import Stack, distributed_stack, exit_on_sigterm
from benchmarks.workload import (
    Uploaded,
    finished_at,
    generated_pdf,
    percentile,
    result_counts,
    upload_all,
    wait_until_final,
)
from pipeline.engine.host_memory import SETTLE_S
from tests.process_tree import mapping_rss_kib, tree_rss_kib

PARAGRAPHS = 3  # regions per generated page
MOVED_KIB = 4096  # a mapping whose resident memory moved this much between readings is named beside the reading
SOAK_REQUESTS = 20_000


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


class Readings:
    """The GPU worker's RSS as (engine requests since the warm-up, KiB), each printed as it is taken."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.points: list[tuple[int, int]] = []
        self.mappings: dict[str, int] = {}

    def take(self, requests: int) -> None:
        time.sleep(2 * SETTLE_S)  # the engine trims once more when its idleness has settled: read what it keeps
        kib, mappings = tree_rss_kib(self.pid), mapping_rss_kib(self.pid)
        self.points.append((requests, kib))
        first = self.points[0][1]
        moved = moved_mappings(self.mappings, mappings) if self.mappings else ""
        self.mappings = mappings
        print(f"{requests:>7} engine requests: GPU worker RSS {kib} KiB ({100 * (kib - first) / first:+.2f}%)"
              f"{'; moved: ' + moved if moved else ''}", flush=True)


def moved_mappings(before: dict[str, int], after: dict[str, int]) -> str:
    """The mappings whose resident memory moved MOVED_KIB or more, largest first: '7f3ca0000000 [anon] +29 MiB'."""
    moves = {name: after.get(name, 0) - before.get(name, 0) for name in before.keys() | after.keys()}
    return ", ".join(f"{name} {kib / 1024:+.0f} MiB" for name, kib in sorted(moves.items(), key=lambda m: -abs(m[1]))
                     if abs(kib) >= MOVED_KIB)


def steady_state(points: list[tuple[int, int]], since: int) -> dict[str, float | int | None]:
    """Growth from the first reading at or past `since` requests to the last, in percent, and the slope of the
    readings from there on, in KiB per 1,000 requests; None while fewer than two readings are there.

    The slope is the median of the slopes between any two readings (Theil-Sen), not a least-squares fit: a reading
    can catch the allocator just after it handed memory back. In a soak one fell 40 MB below its neighbours, the
    next one back level, and with it a least-squares fit over five readings gave 8 MiB per 1,000 requests."""
    steady = [(requests, kib) for requests, kib in points if requests >= since]
    if len(steady) < 2:
        return {"steady_from_requests": None, "steady_growth_pct": None, "steady_slope_kib_per_1000": None}
    slope = statistics.median((y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in itertools.combinations(steady, 2))
    (start, first), (_, last) = steady[0], steady[-1]
    return {"steady_from_requests": start, "steady_growth_pct": round(100 * (last - first) / first, 2),
            "steady_slope_kib_per_1000": round(slope * 1000, 1)}


def measure(stack: Stack, args: argparse.Namespace) -> dict[str, object]:
    """Warm up, run the timed batch and any extra ones, and gather the figures."""
    readings = Readings(stack.processes["gpu"].pid)
    _, warm = run_batch(stack, "warm-up", args.warmup, args.clients)
    failed = failures(warm)
    readings.take(0)
    started = time.time()
    uploads, summaries = run_batch(stack, "load", args.documents, args.clients)
    wall_s = max(finished_at(summary) for summary in summaries.values()) - started
    failed += failures(summaries)
    requests, batches = model_requests(stack, summaries), 0
    readings.take(requests)
    while requests < args.min_requests and not failed:
        batches += 1
        extra = min(args.documents, math.ceil((args.min_requests - requests) / PARAGRAPHS))
        _, more = run_batch(stack, f"extra{batches}", extra, args.clients)
        failed += failures(more)
        requests += model_requests(stack, more)
        readings.take(requests)
    rss_before, rss_after = readings.points[0][1], readings.points[-1][1]
    latencies = [upload.latency_s * 1000 for upload in uploads]
    return {
        "documents": args.documents, "clients": args.clients, "failed": len(failed),
        "upload_p50_ms": round(percentile(latencies, 0.50), 1), "upload_p99_ms": round(percentile(latencies, 0.99), 1),
        "documents_per_s": round(args.documents / wall_s, 2), "wall_s": round(wall_s, 2),
        "engine_requests": requests, "extra_batches": batches,
        "gpu_rss_after_warmup_kib": rss_before, "gpu_rss_after_load_kib": rss_after,
        "gpu_rss_growth_pct": round(100 * (rss_after - rss_before) / rss_before, 2),
        **steady_state(readings.points, args.steady_from),
        "gpu_rss_readings": readings.points,
        "failures": failed[:10]}


def verdicts(figures: dict[str, object], args: argparse.Namespace) -> list[str]:
    """What failed the run, one line each; none when it passed."""
    problems = [f"{figures['failed']} documents did not succeed"] if figures["failed"] else []
    if figures["gpu_rss_growth_pct"] >= args.max_growth:
        problems.append(f"RSS grew {figures['gpu_rss_growth_pct']}% (limit {args.max_growth}%)")
    growth, slope = figures["steady_growth_pct"], figures["steady_slope_kib_per_1000"]
    if growth is not None and growth > args.max_steady_growth:
        problems.append(f"RSS grew {growth}% after {figures['steady_from_requests']} requests "
                        f"(limit {args.max_steady_growth}%)")
    if slope is not None and slope > args.max_slope:
        problems.append(f"RSS slope {slope} KiB per 1,000 requests (limit {args.max_slope})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=20, help="documents before the first RSS reading")
    parser.add_argument("--min-requests", type=int, default=500, help="engine requests after the warm-up")
    parser.add_argument("--max-growth", type=float, default=10.0, help="GPU worker RSS growth allowed, percent")
    parser.add_argument("--steady-from", type=int, default=2000, help="engine requests before the steady state")
    parser.add_argument("--max-steady-growth", type=float, default=2.0, help="RSS growth in the steady state, percent")
    parser.add_argument("--max-slope", type=float, default=200.0, help="steady RSS slope, KiB per 1,000 requests")
    parser.add_argument("--soak", action="store_true", help=f"at least {SOAK_REQUESTS:,} engine requests")
    parser.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: a tiny one)")
    args = parser.parse_args()
    if args.soak:
        args.min_requests = max(args.min_requests, SOAK_REQUESTS)
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="quire-load-") as root, distributed_stack(Path(root), args.model) as stack:
        figures = measure(stack, args)
    print(f"{figures['documents']} documents from {figures['clients']} clients: {figures['failed']} failed; "
          f"upload p50 {figures['upload_p50_ms']} ms, p99 {figures['upload_p99_ms']} ms; "
          f"{figures['documents_per_s']} documents/s over {figures['wall_s']} s")
    print(f"GPU worker RSS {figures['gpu_rss_after_warmup_kib']} KiB after the warm-up, "
          f"{figures['gpu_rss_after_load_kib']} KiB after {figures['engine_requests']} engine requests: "
          f"{figures['gpu_rss_growth_pct']}% (limit {args.max_growth}%)")
    print(f"steady state from {figures['steady_from_requests']} requests: {figures['steady_growth_pct']}% "
          f"(limit {args.max_steady_growth}%), slope {figures['steady_slope_kib_per_1000']} KiB per 1,000 requests "
          f"(limit {args.max_slope})")
    problems = verdicts(figures, args)
    print(json.dumps({**figures, "problems": problems}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
