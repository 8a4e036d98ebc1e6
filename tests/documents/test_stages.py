"""`quire process` and the service walk the same stage functions in the same order: a document's ingest, each page's
layout, each region's recognition and the document's finish are pipeline/documents/stages.py's functions either
way, and the JSON and Markdown they come to are the same. Both are walked a page at a time here (quire process with
one page in flight, the service's sends run depth first), so the order is the same call for call."""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pipeline.db.migrate import upgrade_to_head
from pipeline.db.models import Document
from pipeline.db.session import session_scope
from pipeline.documents.process import document_status, lay_out, recognized_region
from pipeline.documents.stages import open_document
from pipeline.jobs.context import open_context
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.graph import run_stage
from pipeline.jobs.start import start_document
from tests.jobs.conftest import accept
from tests.jobs.expected import CORPUS, comparable, processed, service_settings
from workers.engine_host import EngineHost

STAGE_OF = {open_document.__code__: "ingest", lay_out.__code__: "prepare",
            recognized_region.__code__: "recognize", document_status.__code__: "finalize"}
FOUR_PAGES = (CORPUS / "pdflatex-4-pages.pdf").read_bytes()


@dataclass
class Kept:
    """A dispatcher that keeps the sends, for the test to run in its own thread."""

    sends: list[tuple[Stage, str | int]] = field(default_factory=list)

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        self.sends.append((stage, key))

    def take(self) -> list[tuple[Stage, str | int]]:
        sends, self.sends = self.sends, []
        return sends


@contextmanager
def walked() -> Iterator[list[str]]:
    """The stage functions this thread calls meanwhile, in order, each by the stage it is."""
    calls: list[str] = []

    def profile(frame: Any, event: str, _: object) -> None:
        if event == "call" and frame.f_code in STAGE_OF:
            calls.append(STAGE_OF[frame.f_code])

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def through_the_service(data: bytes, name: str, cache_dir: Path, host: EngineHost) -> tuple[list[str], dict, str]:
    """(stages walked, JSON, Markdown) of the service's stages in this thread, what each sends run before the
    sends that were waiting (so a page is recognised before the next one is prepared)."""
    settings = service_settings(cache_dir, Path(host.settings.model))
    upgrade_to_head(settings.database_url)
    dispatcher = Kept()
    ctx = open_context(settings, dispatcher, host)
    try:
        document_id = accept(SimpleNamespace(context=ctx), data, name, send=False)
        start_document(dispatcher, document_id)
        todo = deque(dispatcher.take())
        with walked() as stages:
            while todo:
                run_stage(ctx, *todo.popleft())
                todo.extendleft(reversed(dispatcher.take()))
        with session_scope(ctx.db) as session:
            document = session.get_one(Document, document_id)
            return stages, json.loads(ctx.blobs.get(document.result_key)), ctx.blobs.get(document.markdown_key).decode()
    finally:
        ctx.close()


def through_quire_process(data: bytes, name: str, cache_dir: Path, host: EngineHost) -> tuple[list[str], dict, str]:
    settings = service_settings(cache_dir, Path(host.settings.model)).model_copy(update={"pages_in_flight": 1})
    with walked() as stages:
        result, markdown = processed(data, name, settings, host.engine)
    return stages, result, markdown


def test_the_service_and_quire_process_walk_the_same_stages_to_the_same_result(tmp_path, engine_host):
    service, service_json, service_markdown = through_the_service(FOUR_PAGES, "four.pdf", tmp_path, engine_host)
    process, process_json, process_markdown = through_quire_process(FOUR_PAGES, "four.pdf", tmp_path,
                                                                     engine_host)
    assert service == process
    assert service[0] == "ingest" and service[-1] == "finalize" and service.count("prepare") == 4
    pages = "".join(stage[0] for stage in service[1:-1]).split("p")[1:]  # each page: its layout, then its regions
    assert len(pages) == 4 and all(page and set(page) == {"r"} for page in pages)
    assert comparable(service_json) == comparable(process_json)
    assert service_markdown == process_markdown
