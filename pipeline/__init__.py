"""Quire's library. `from pipeline import process`: a document (path or bytes) in, its result out
(pipeline/documents_api.py); imported on first use, so `import pipeline.config` stays light."""

from __future__ import annotations

from typing import Any

__all__ = ["process"]


def __getattr__(name: str) -> Any:
    if name == "process":
        from pipeline.documents_api import process

        return process
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
