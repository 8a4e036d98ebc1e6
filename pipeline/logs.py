"""Structured logs: one JSON object per line, with the document, page and stage a line is about as fields, so a
log store can follow one document across the API and every worker that touched it."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

# Fields a record may carry through `extra=`; they become top-level keys of the JSON line.
CONTEXT_FIELDS = ("document_id", "page_id", "stage", "tenant", "duration_ms", "cpu_ms", "outcome", "code")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        line.update({name: getattr(record, name) for name in CONTEXT_FIELDS if hasattr(record, name)})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(style: Literal["json", "text"], level: str = "INFO") -> None:
    """Route the root logger to stderr in the chosen style (the service commands call this once at start)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if style == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
