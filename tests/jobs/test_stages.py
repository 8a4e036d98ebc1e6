"""The service's stages, run by the embedded workers on the real tiny engine: a document goes ingest → prepare →
recognize → finalize, its result equals the library pipeline's, bad input ends as codes, and every stage may run
again without changing anything."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace

import jsonschema
import pytest
from sqlalchemy import func, select

from pipeline.db.models import Document, Page, RecognitionCache, Region
from pipeline.db.session import session_scope
from pipeline.documents.assemble import load_schema
from pipeline.engine.model.errors import CheckpointError
from pipeline.engine.scheduler import Step
from pipeline.jobs.cancel import cancel_document
from pipeline.jobs.dispatch import Send
from pipeline.jobs.graph import GRAPH, run_stage
from tests.documents.samples import ENCRYPTED, ENCRYPTED_PASSWORD
from tests.jobs.conftest import accept, embedded_workers, wait_until_final
from tests.jobs.expected import CORPUS, comparable, pdf_with_an_unrenderable_page, processed, service_settings
from workers.embedded import EmbeddedWorkers

FOUR_PAGES = (CORPUS / "pdflatex-4-pages.pdf").read_bytes()


def result_of(workers: EmbeddedWorkers, document: Document) -> tuple[dict, str]:
    blobs = workers.context.blobs
    return json.loads(blobs.get(document.result_key)), blobs.get(document.markdown_key).decode()


def test_a_pdf_goes_through_every_stage_and_its_result_is_what_quire_process_gives(service, engine_host):
    document = wait_until_final(service, accept(service, FOUR_PAGES, "four.pdf"))
    result, markdown = result_of(service, document)
    assert (document.status, document.page_count, document.pages_done) == ("succeeded", 4, 4)
    assert {"ingest", "total"} <= set(document.timings) and set(result["timings_ms"]) == set(document.timings)
    jsonschema.validate(result, load_schema())
    expected, expected_markdown = processed(FOUR_PAGES, "four.pdf", service.context.settings, engine_host.engine)
    assert comparable(result) == comparable(expected)
    assert markdown == expected_markdown
    with session_scope(service.context.db) as session:
        pages = session.scalars(select(Page).where(Page.document_id == document.id)).all()
        assert all(page.status == "succeeded" and service.context.blobs.exists(page.image_key) for page in pages)
        regions = session.scalars(select(Region).join(Page).where(Page.document_id == document.id)).all()
        assert {(region.status, region.source, region.attempts) for region in regions} == {("succeeded", "model", 1)}
        assert "password" not in session.get_one(Document, document.id).options


def test_with_prepare_on_the_gpu_queue_a_prepared_page_goes_on_to_recognize_in_its_thread_with_the_same_result(
        tmp_path, tiny_checkpoint, engine_host, caplog):
    caplog.set_level("INFO", logger="quire.stages")
    settings = service_settings(tmp_path, tiny_checkpoint).model_copy(update={"prepare_queue": "gpu"})
    with embedded_workers(settings, engine_host) as workers:
        sent, send = [], workers.send
        workers.send = lambda stage, key, delay_s=0.0: (sent.append(stage), send(stage, key, delay_s))[1]
        document = wait_until_final(workers, accept(workers, FOUR_PAGES, "four.pdf"))
        result, markdown = result_of(workers, document)
        assert len(workers.context.page_images) == 0  # each taken by its page's recognize
    assert document.status == "succeeded" and "recognize" not in sent and sent.count("prepare") == 4
    expected, expected_markdown = processed(FOUR_PAGES, "four.pdf", settings, engine_host.engine)
    assert comparable(result) == comparable(expected) and markdown == expected_markdown
    threads = {(record.stage, record.page_id): record.threadName for record in caplog.records
               if record.name == "quire.stages" and getattr(record, "page_id", None) is not None}
    pages = {page_id for _, page_id in threads}
    assert len(pages) == 4 and all(threads[("recognize", page)] == threads[("prepare", page)] for page in pages)


@pytest.mark.parametrize(("name", "layout", "reason"), [("grayscale-image.pdf", "page", "no text layer"),
                                                         ("minimal-document.pdf", "pdf", None)])
def test_each_page_records_the_layout_that_laid_it_out_and_why_as_quire_process_does(service, engine_host, name,
                                                                                     layout, reason):
    data = (CORPUS / name).read_bytes()
    document = wait_until_final(service, accept(service, data, name))
    result, _ = result_of(service, document)
    expected, _ = processed(data, name, service.context.settings, engine_host.engine)
    assert [(page["layout"], page["layout_reason"]) for page in result["pages"]] == [(layout, reason)]
    assert comparable(result) == comparable(expected)
    with session_scope(service.context.db) as session:
        page = session.scalars(select(Page).where(Page.document_id == document.id)).one()
        assert (page.layout, page.layout_reason) == (layout, reason)


def test_every_stage_logs_the_document_or_page_it_ran_on(service, caplog):
    caplog.set_level("INFO", logger="quire.stages")
    document_id = accept(service, FOUR_PAGES, "four.pdf")
    wait_until_final(service, document_id)
    time.sleep(0.2)  # finalize logs after it commits
    ran = [(record.stage, getattr(record, "document_id", None), getattr(record, "page_id", None))
           for record in caplog.records if record.name == "quire.stages" and record.outcome == "done"]
    assert ("ingest", document_id, None) in ran and ("finalize", document_id, None) in ran
    pages = {page_id for stage, _, page_id in ran if stage == "prepare"}
    assert len(pages) == 4 and pages == {page_id for stage, _, page_id in ran if stage == "recognize"}


def test_an_encrypted_pdf_fails_with_encrypted_and_opens_with_its_password(service):
    data = (CORPUS / ENCRYPTED).read_bytes()
    locked = wait_until_final(service, accept(service, data, "locked.pdf"))
    assert (locked.status, locked.error_code, locked.page_count) == ("failed", "encrypted", 0)
    result, _ = result_of(service, locked)
    assert (result["status"], result["error"]["code"], result["pages"]) == ("failed", "encrypted", [])
    opened = wait_until_final(service, accept(service, data, "opened.pdf", password=ENCRYPTED_PASSWORD))
    assert opened.status == "succeeded"


def test_a_page_that_cannot_be_rendered_fails_alone_and_the_document_is_partial(service):
    document = wait_until_final(service, accept(service, pdf_with_an_unrenderable_page(), "bomb.pdf"))
    result, markdown = result_of(service, document)
    assert document.status == "partial"
    assert [(page["status"], (page["error"] or {}).get("code")) for page in result["pages"]] == [
        ("succeeded", None), ("failed", "page_too_large")]
    assert "<!-- page 2 failed: page_too_large -->" in markdown


def test_each_stage_returns_its_sends_once_its_work_is_committed_and_sends_nothing_itself(service):
    ctx = service.context
    sent: list[str] = []
    service.send = lambda stage, key, delay_s=0.0: sent.append(stage)
    document_id = accept(service, FOUR_PAGES, "four.pdf", send=False)
    prepares = GRAPH["ingest"].run(ctx, document_id)
    with session_scope(ctx.db) as session:
        page_ids = session.scalars(select(Page.id).where(Page.document_id == document_id).order_by(Page.index)).all()
    assert prepares == [Send("prepare", page_id) for page_id in page_ids]
    recognizes = [send for page_id in page_ids for send in GRAPH["prepare"].run(ctx, page_id)]
    assert [(send.stage, send.key) for send in recognizes] == [("recognize", page_id) for page_id in page_ids]
    with session_scope(ctx.db) as session:  # each page's image is stored before its send is returned
        keys = session.scalars(select(Page.image_key).where(Page.document_id == document_id)
                               .order_by(Page.index)).all()
        assert [send.image[0] for send in recognizes] == keys
    finalizes = [GRAPH["recognize"].run(ctx, page_id) for page_id in page_ids]
    assert finalizes == [[], [], [], [Send("finalize", document_id)]]  # the last page to finish sends it
    assert GRAPH["finalize"].run(ctx, document_id) == []  # no webhook: nothing to deliver
    assert sent == []
    with session_scope(ctx.db) as session:
        assert session.get_one(Document, document_id).status == "succeeded"


def test_every_stage_run_again_changes_nothing(service):
    """Re-delivery: each stage, sent again after the document finished, leaves the rows and result as they were."""
    document = wait_until_final(service, accept(service, FOUR_PAGES, "four.pdf"))
    ctx = service.context
    before = snapshot(service, document.id)
    with session_scope(ctx.db) as session:
        page_ids = session.scalars(select(Page.id).where(Page.document_id == document.id)).all()
    run_stage(ctx, "ingest", document.id)
    for page_id in page_ids:
        run_stage(ctx, "prepare", page_id)
        run_stage(ctx, "recognize", page_id)
    run_stage(ctx, "finalize", document.id)
    time.sleep(0.5)  # whatever those sent on runs on the pools
    assert snapshot(service, document.id) == before


def test_a_document_deleted_while_it_is_worked_on_ends_its_remaining_tasks_quietly(service, caplog):
    ctx = service.context
    document_id = accept(service, FOUR_PAGES, "four.pdf", send=False)
    run_stage(ctx, "ingest", document_id)  # pages exist; their prepare tasks are queued
    with session_scope(ctx.db) as session:
        page_ids = session.scalars(select(Page.id).where(Page.document_id == document_id)).all()
        session.delete(session.get_one(Document, document_id))
    for page_id in page_ids:
        run_stage(ctx, "prepare", page_id)
        run_stage(ctx, "recognize", page_id)
    run_stage(ctx, "ingest", document_id)
    run_stage(ctx, "finalize", document_id)
    time.sleep(0.5)  # the prepare tasks ingest sent run on the pools too
    with session_scope(ctx.db) as session:
        assert session.scalar(select(func.count()).select_from(Page)) == 0
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


@pytest.mark.slow
def test_a_cancel_mid_recognition_aborts_the_engine_requests_and_no_region_row_changes_after_it(service, engine_host):
    engine = engine_host.engine
    schedule = engine.scheduler.schedule
    engine.scheduler.schedule = lambda: Step([])  # regions queue up in the engine but make no progress
    try:
        document_id = accept(service, FOUR_PAGES, "four.pdf")
        deadline = time.monotonic() + 30
        while not engine.sequences and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.sequences, "no region reached the engine"
        assert cancel_document(service.context.db, service, "acme", document_id).status == "canceled"
        rows = snapshot(service, document_id)
        deadline = time.monotonic() + 10
        while engine.sequences and time.monotonic() < deadline:  # the waiting recognize tasks abort them
            time.sleep(0.05)
        assert not engine.sequences
    finally:
        del engine.scheduler.schedule
    assert engine.scheduler.schedule == schedule
    time.sleep(1.0)  # any task still running (prepare of later pages) finds the document canceled
    assert snapshot(service, document_id) == rows
    assert rows[0] == "canceled"


def test_a_crop_seen_before_by_the_same_tenant_comes_from_the_result_cache(service):
    first = wait_until_final(service, accept(service, FOUR_PAGES, "four.pdf"))
    again = wait_until_final(service, accept(service, FOUR_PAGES, "again.pdf", dpi=40, layout="pdf"))
    other = wait_until_final(service, accept(service, FOUR_PAGES, "four.pdf", tenant="globex"))
    sources = {name: {region["source"] for page in result_of(service, doc)[0]["pages"] for region in page["regions"]}
               for name, doc in (("first", first), ("again", again), ("other", other))}
    assert sources == {"first": {"model"}, "again": {"cache"}, "other": {"model"}}
    texts = [[region["text"] for page in result_of(service, doc)[0]["pages"] for region in page["regions"]]
             for doc in (first, again)]
    assert texts[0] == texts[1]
    with session_scope(service.context.db) as session:
        assert session.scalar(select(func.count()).select_from(RecognitionCache)) == 2 * 8  # 8 crops, two tenants


def test_regions_of_two_pages_are_in_one_engine_step(service, engine_host):
    """Two GPU threads each recognise a page; the engine steps hold regions of both (continuous batching).

    The engine is held back until both pages' regions are queued, so the assertion is about the batching, not
    about which thread happened to be first; without two threads feeding one engine it never happens.
    """
    engine = engine_host.engine
    steps: list[set[str]] = []
    schedule, prepare = engine.scheduler.schedule, engine.runner.prepare
    opened = threading.Event()

    def held_schedule():
        if not opened.is_set():
            if len({request_id.split("-")[0] for request_id in engine.sequences}) < 2:
                time.sleep(0.001)
                return Step([])
            opened.set()
        return schedule()

    def recorded_prepare(step):
        steps.append({seq.request_id.split("-")[0] for seq, _ in step.items})
        return prepare(step)

    engine.scheduler.schedule, engine.runner.prepare = held_schedule, recorded_prepare
    try:
        document = wait_until_final(service, accept(service, FOUR_PAGES, "four.pdf"))
    finally:
        del engine.scheduler.schedule, engine.runner.prepare
    assert document.status == "succeeded"
    assert max(len(pages) for pages in steps) >= 2, steps


def snapshot(workers: EmbeddedWorkers, document_id: str) -> tuple:
    with session_scope(workers.context.db) as session:
        document = session.get_one(Document, document_id)
        rows = session.execute(select(Region.page_id, Region.index, Region.status, Region.source, Region.text,
                                      Region.attempts).join(Page).where(Page.document_id == document_id)
                               .order_by(Region.page_id, Region.index)).all()
        return (document.status, document.pages_done, document.result_key, document.markdown_key,
                [tuple(row) for row in rows])


def test_a_stage_failing_on_a_typed_error_logs_its_code_and_no_traceback(monkeypatch, caplog):
    def cannot_load(ctx, key):
        raise CheckpointError("/models/ocr/config.json: not found", "no_config")

    monkeypatch.setitem(GRAPH, "recognize", replace(GRAPH["recognize"], run=cannot_load))
    with caplog.at_level(logging.WARNING), pytest.raises(CheckpointError):
        run_stage(None, "recognize", 7)
    [record] = [r for r in caplog.records if r.getMessage().startswith("recognize 7 raised")]
    assert record.getMessage().endswith("/models/ocr/config.json: not found")
    assert record.code == "no_config" and not record.exc_info
