"""Service logs are JSON lines carrying the document, page and stage they are about."""

from __future__ import annotations

import json
import logging

from pipeline.logs import JsonFormatter


def record(**extra: object) -> logging.LogRecord:
    logger = logging.getLogger("quire.test")
    return logger.makeRecord("quire.test", logging.INFO, __file__, 1, "prepare %s done", (7,), None, extra=extra)


def test_a_record_is_one_json_line_with_its_context_fields_at_the_top_level() -> None:
    line = JsonFormatter().format(record(stage="prepare", page_id=7, document_id="d-1", duration_ms=12.5))
    parsed = json.loads(line)
    assert "\n" not in line
    assert {key: parsed[key] for key in ("level", "logger", "message", "stage", "page_id", "document_id")} == {
        "level": "info", "logger": "quire.test", "message": "prepare 7 done", "stage": "prepare", "page_id": 7,
        "document_id": "d-1"}
    assert parsed["time"].endswith("+00:00")


def test_an_exception_travels_inside_the_line() -> None:
    try:
        raise ValueError("bad page")
    except ValueError:
        import sys

        failed = logging.getLogger("quire.test").makeRecord("quire.test", logging.ERROR, __file__, 1, "boom", (),
                                                              sys.exc_info())
    parsed = json.loads(JsonFormatter().format(failed))
    assert parsed["level"] == "error" and "ValueError: bad page" in parsed["exception"]
