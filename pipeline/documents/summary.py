"""One line per processed document for the console: what came out, what was chosen for it, and where it went.

A user who sees "4 pages, succeeded" but not that `auto` fell back to whole-page regions, or that the model's
regions were skipped, cannot tell a good result from a degraded one; so the line says both, and the files.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.documents.results import DocumentOutput


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def summary_line(document: DocumentOutput, outputs: list[Path]) -> str:
    """`3 pages, succeeded; layout pdf (no layout weights); model M@rev; 2 regions skipped (model_none) → files`."""
    status = f"{document.status} ({document.error.code})" if document.error else document.status
    parts = [f"{plural(len(document.pages), 'page')}, {status}"]
    parts += [part for part in (_layouts(document), _model(document), _skipped(document)) if part]
    files = ", ".join(f"{path}/" if path.is_dir() else str(path) for path in outputs if path.exists())
    return "; ".join(parts) + (f" → {files}" if files else "")


def layout_label(name: str | None, reason: str | None) -> str:
    return f"{name} ({reason})" if reason else str(name)


def _layouts(document: DocumentOutput) -> str:
    used = Counter(layout_label(page.layout, page.layout_reason) for page in document.pages if page.layout)
    if len(used) == 1:
        return f"layout {next(iter(used))}"
    return "layout " + ", ".join(f"{label} on {plural(count, 'page')}" for label, count in used.items()) if used else ""


def _model(document: DocumentOutput) -> str:
    used = any(region.source in ("model", "cache") for page in document.pages for region in page.regions)
    if not used:
        return ""
    return f"model {document.model}" + (f"@{document.model_revision[:12]}" if document.model_revision else "")


def _skipped(document: DocumentOutput) -> str:
    codes = Counter(region.error.code for page in document.pages for region in page.regions
                    if region.skipped and region.error)
    if not codes:
        return ""
    return f"{plural(sum(codes.values()), 'region')} skipped ({', '.join(sorted(codes))})"
