"""What the workers and the API rely on from the database, on SQLite and Postgres alike."""

from __future__ import annotations

from datetime import UTC

import pytest
from sqlalchemy import Engine, delete, func, select, text, update
from sqlalchemy.exc import IntegrityError

from pipeline.config import Settings
from pipeline.db.models import Document, Page, Region
from pipeline.db.session import create_db_engine, reading, session_scope
from pipeline.db.upserts import CropKey, recall_recognitions, remember_recognitions, upsert_regions

SHA = "ab" * 32


def add_page(engine: Engine, tenant: str = "acme", regions: int = 2) -> int:
    """A queued document with one page and `regions` pending layout regions; the page's id."""
    with session_scope(engine) as session:
        document = Document(tenant=tenant, filename="scan.pdf", sha256=SHA, size_bytes=1234,
                            options={"dpi": 200, "layout": "auto"})
        page = Page(index=0, width_px=1700, height_px=2200, dpi=200.0)
        page.regions = [Region(index=i, reading_order=i, label="text", score=0.9, bbox_px=[0, 10 * i, 100, 10 * i + 9],
                               bbox_pt=[0.0, 3.6 * i, 36.0, 3.6 * i + 3.24], task="ocr") for i in range(regions)]
        document.pages = [page]
        session.add(document)
        session.flush()
        return page.id


def result(page_id: int, index: int, text_: str, attempts: int = 1) -> dict:
    """A recognised region as a worker writes it: the layout's columns with the result's."""
    return {"page_id": page_id, "index": index, "reading_order": index, "label": "text", "task": "ocr",
            "bbox_px": [0, 10 * index, 100, 10 * index + 9], "bbox_pt": [0.0, 3.6 * index, 36.0, 3.6 * index + 3.24],
            "status": "succeeded", "source": "model", "text": text_, "prompt_tokens": 310, "generated_tokens": 12,
            "cached_tokens": 256, "latency_ms": 41.5, "attempts": attempts}


def test_a_document_round_trips_with_its_pages_regions_and_json(engine: Engine) -> None:
    page_id = add_page(engine)
    with session_scope(engine) as session:
        document = session.scalars(select(Document)).one()
        assert document.status == "queued" and len(document.id) == 36
        assert document.options == {"dpi": 200, "layout": "auto"}
        assert [region.bbox_pt for region in document.pages[0].regions][1] == [0.0, 3.6, 36.0, 6.84]
        assert document.pages[0].id == page_id
        assert document.created_at.tzinfo is UTC  # aware UTC on SQLite too, comparable with datetime.now(UTC)


def test_region_results_are_upserts_keyed_by_page_and_index(engine: Engine) -> None:
    """A re-delivered recognize task writes its results again: still one row per region, the latest result;
    columns the rows leave out (the layout's score here) keep their stored values."""
    page_id = add_page(engine)
    with session_scope(engine) as session:
        upsert_regions(session, [result(page_id, 0, "first try"), result(page_id, 1, "second region")])
    with session_scope(engine) as session:
        upsert_regions(session, [result(page_id, 0, "re-delivered", attempts=2)])
    with session_scope(engine) as session:
        regions = session.scalars(select(Region).order_by(Region.index)).all()
        assert [(r.index, r.text, r.attempts, r.source) for r in regions] == [
            (0, "re-delivered", 2, "model"), (1, "second region", 1, "model")]
        assert regions[0].score == 0.9 and regions[0].bbox_px == [0, 0, 100, 9]


def test_region_upsert_inserts_rows_that_do_not_exist_yet(engine: Engine) -> None:
    page_id = add_page(engine, regions=0)
    row = {**result(page_id, 3, "new"), "reading_order": 0, "label": "table", "bbox_px": [1, 2, 3, 4],
           "bbox_pt": [0.5, 1, 1.5, 2], "task": "table", "html": "<table></table>"}
    with session_scope(engine) as session:
        upsert_regions(session, [row])
        upsert_regions(session, [row])
    with session_scope(engine) as session:
        (region,) = session.scalars(select(Region)).all()
        assert (region.index, region.html, region.status) == (3, "<table></table>", "succeeded")


def test_upsert_rows_must_name_the_same_columns(engine: Engine) -> None:
    page_id = add_page(engine)
    with session_scope(engine) as session, pytest.raises(ValueError, match="same columns"):
        upsert_regions(session, [result(page_id, 0, "a"), {"page_id": page_id, "index": 1, "text": "b"}])


def test_deleting_a_document_deletes_its_pages_and_regions_in_the_database(engine: Engine) -> None:
    """ON DELETE CASCADE in the database itself (SQLite only honours it with foreign keys turned on)."""
    add_page(engine)
    with session_scope(engine) as session:
        session.execute(delete(Document))
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Page)) == 0
        assert session.scalar(select(func.count()).select_from(Region)) == 0


@pytest.mark.parametrize(("model", "column", "value"), [
    (Document, "status", "done"), (Page, "status", "rendering"), (Region, "status", "ok"), (Region, "source", "ocr")])
def test_statuses_and_sources_outside_the_lists_are_refused(engine: Engine, model, column: str, value: str) -> None:
    add_page(engine)
    with pytest.raises(IntegrityError), session_scope(engine) as session:
        session.execute(model.__table__.update().values({column: value}))


def test_an_idempotency_key_is_unique_per_tenant(engine: Engine) -> None:
    def upload(tenant: str) -> None:
        with session_scope(engine) as session:
            session.add(Document(tenant=tenant, filename="a.pdf", sha256=SHA, size_bytes=1, idempotency_key="k1"))

    upload("acme")
    upload("globex")  # another tenant may use the same key
    with pytest.raises(IntegrityError):
        upload("acme")
    with session_scope(engine) as session:  # documents without a key never collide
        session.add_all([Document(tenant="acme", filename=f"{i}.pdf", sha256=SHA, size_bytes=1) for i in range(2)])


def test_the_recognition_cache_keeps_the_first_result_per_tenant_model_task_and_crop(engine: Engine) -> None:
    def key(tenant: str = "acme", revision: str = "rev-1", task: str = "ocr") -> CropKey:
        return CropKey(tenant, revision, task, SHA)

    with session_scope(engine) as session:
        remember_recognitions(session, [(key(), {"text": "ACME Corp."}), (key(), {"text": "a racing worker's"})])
        remember_recognitions(session, [(key(), {"text": "written later"})])
        remember_recognitions(session, [(key(task="table"), {"html": "<table></table>"})])
    with session_scope(engine) as session:
        ocr, table, new_model, other_tenant, again = recall_recognitions(
            session, [key(), key(task="table"), key(revision="rev-2"), key(tenant="globex"), key()])
    assert ocr.text == again.text == "ACME Corp."
    assert table.html == "<table></table>"
    assert new_model is None  # a new model revision starts afresh
    assert other_tenant is None  # another tenant never sees the hit
    assert recall_recognitions(session, []) == []


def test_session_scope_rolls_back_when_the_block_raises(engine: Engine) -> None:
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        session.add(Document(tenant="acme", filename="a.pdf", sha256=SHA, size_bytes=1))
        session.flush()
        raise RuntimeError("worker died")
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Document)) == 0


def test_the_default_database_is_a_sqlite_file_under_the_cache_dir_in_wal_mode(tmp_path) -> None:
    settings = Settings(cache_dir=tmp_path / "cache", database_url="")
    assert settings.database_url == f"sqlite:///{tmp_path / 'cache' / 'quire.db'}"
    assert settings.blob_dir == tmp_path / "cache" / "blobs"
    engine = create_db_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
    finally:
        engine.dispose()


def test_a_tilde_in_a_sqlite_url_means_the_home_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings(database_url="sqlite:///~/q/quire.db").database_url == f"sqlite:///{tmp_path}/q/quire.db"


def test_a_reading_connection_holds_no_transaction_so_a_writer_goes_on_beside_it(migrated_database: Engine):
    page_id = add_page(migrated_database)
    status = select(Page.status).where(Page.id == page_id)
    with reading(migrated_database) as connection:
        assert connection.execute(status).scalar() == "queued"
        with session_scope(migrated_database) as session:  # on SQLite a read's BEGIN IMMEDIATE would hold it back
            session.execute(update(Page).where(Page.id == page_id).values(status="processing"))
        assert connection.execute(status).scalar() == "processing"
