"""The pages benchmark's service side: the corpus uploaded to the embedded service (`quire serve` without a broker)
and polled until every document is final; pages/s over the time from the first upload to the last `finished_at`.

The service runs the settings given (model, layout, text layer, DPI, tokens per region) with its own defaults for
the rest; its engine is loaded by one warm-up document (not of the corpus: the service answers a file it has seen
with the result it has) before the clock starts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.stack import embedded_service
from benchmarks.workload import finished_at, generated_pdf, result_counts, upload_all, wait_until_final
from pipeline.config import Settings
from pipeline.engine_settings import gpu_threads

CLIENTS = 4


def embedded_pages_per_s(paths: list[Path], settings: Settings, root: Path) -> dict[str, Any]:
    files = [(path.name, path.read_bytes()) for path in paths]
    root.mkdir(parents=True, exist_ok=True)
    env = {"QUIRE_MAX_TOKENS": str(settings.max_tokens), "QUIRE_DPI": str(settings.dpi),
           "QUIRE_LAYOUT": settings.layout, "QUIRE_LAYOUT_MODEL": settings.layout_model,
           "QUIRE_TEXT_LAYER": settings.text_layer, "QUIRE_DEVICE": settings.device, "QUIRE_DTYPE": settings.dtype,
           "QUIRE_GPU_THREADS": str(gpu_threads(settings)), "QUIRE_CPU_THREADS": str(Settings().cpu_threads)}
    with embedded_service(root, settings.model, **env) as url:
        warm = upload_all(url, [("warm-up.pdf", generated_pdf("service warm-up"))], 1)
        wait_until_final(url, [upload.document_id for upload in warm], timeout_s=600)
        started = time.time()
        uploads = upload_all(url, files, CLIENTS)
        summaries = wait_until_final(url, [upload.document_id for upload in uploads], timeout_s=600 + 10 * len(files))
        wall = max(finished_at(summary) for summary in summaries.values()) - started
        pages = sum(result_counts(url, document_id)[0] for document_id, summary in summaries.items()
                    if summary["status"] != "failed")
    return {"service_pages": pages, "service_wall_s": round(wall, 3), "pages_per_s": round(pages / wall, 3)}
