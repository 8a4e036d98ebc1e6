"""The migrations build the schema the models describe, on SQLite and on Postgres, from an empty database."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from pipeline.cli import main
from pipeline.db.migrate import alembic_config, upgrade_to_head
from pipeline.db.models import Base
from pipeline.db.session import create_db_engine

TABLES = {"documents", "pages", "regions", "recognition_cache", "tenants", "api_keys", "batches", "webhook_deliveries"}


def head() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_upgrade_head_on_an_empty_database_creates_every_table(engine: Engine) -> None:
    assert TABLES | {"alembic_version"} == set(inspect(engine).get_table_names())
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == head()


def test_autogenerate_finds_no_difference_between_models_and_migrations(engine: Engine) -> None:
    """A model change without a revision (or a revision that drifts from the models) fails here."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_the_constraints_the_service_relies_on_are_in_the_database(engine: Engine) -> None:
    schema = inspect(engine)
    unique = {table: {tuple(c["column_names"]) for c in schema.get_unique_constraints(table)} for table in TABLES}
    assert ("tenant", "idempotency_key") in unique["documents"]
    assert ("document_id", "index") in unique["pages"]
    assert ("page_id", "index") in unique["regions"]
    assert ("tenant", "model_revision", "task", "image_sha256") in unique["recognition_cache"]
    assert ("dedup_key",) in unique["documents"]
    assert ["tenant", "sha256"] in [index["column_names"] for index in schema.get_indexes("documents")]
    for table in ("pages", "regions"):
        (foreign_key,) = schema.get_foreign_keys(table)
        assert foreign_key["options"].get("ondelete") == "CASCADE"
    checks = {check["name"] for table in TABLES for check in schema.get_check_constraints(table)}
    assert {"ck_documents_status", "ck_pages_status", "ck_regions_status", "ck_regions_source"} <= checks


def test_downgrade_to_base_and_upgrade_again(empty_database: str) -> None:
    upgrade_to_head(empty_database)
    command.downgrade(alembic_config(empty_database), "base")
    engine = create_db_engine(empty_database)
    try:
        assert not TABLES & set(inspect(engine).get_table_names())
        upgrade_to_head(empty_database)
        assert TABLES <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_quire_migrate_upgrades_the_configured_database_and_is_repeatable(tmp_path, monkeypatch, capsys) -> None:
    database = tmp_path / "nested" / "quire.db"  # the directory is created on demand, as on a first run
    monkeypatch.setenv("QUIRE_DATABASE_URL", f"sqlite:///{database}")
    assert main(["migrate"]) == 0
    assert main(["migrate"]) == 0
    assert str(database) in capsys.readouterr().out
    engine = create_db_engine(f"sqlite:///{database}")
    try:
        assert TABLES <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_0004_adds_the_pages_layout_reason_and_its_downgrade_drops_it_keeping_the_pages(empty_database: str) -> None:
    config = alembic_config(empty_database)
    command.upgrade(config, "0003")
    engine = create_db_engine(empty_database)
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO documents (id, tenant, filename, sha256, size_bytes, status, options, timings, pages_done,"
                " created_at, updated_at) VALUES ('d', 't', 'f.pdf', 's', 1, 'queued', '{}', '{}', 0, :now, :now)"),
                {"now": "2026-12-04 00:00:00+00:00"})
            connection.execute(text(
                "INSERT INTO pages (document_id, \"index\", status, rotation, layout, timings, created_at, updated_at)"
                " VALUES ('d', 0, 'succeeded', 0, 'pdf', '{}', :now, :now)"), {"now": "2026-12-04 00:00:00+00:00"})
        command.upgrade(config, "0004")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT layout, layout_reason FROM pages")).one() == ("pdf", None)
        command.downgrade(config, "0003")
        assert "layout_reason" not in {column["name"] for column in inspect(engine).get_columns("pages")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT layout FROM pages")).scalar_one() == "pdf"
    finally:
        engine.dispose()


def test_0005_lets_a_region_be_skipped_and_its_downgrade_reads_a_skipped_one_as_failed(empty_database: str) -> None:
    config = alembic_config(empty_database)
    upgrade_to_head(empty_database)
    engine = create_db_engine(empty_database)
    now = {"now": "2026-12-04 00:00:00+00:00"}
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO documents (id, tenant, filename, sha256, size_bytes, status, options, timings, pages_done,"
                " created_at, updated_at) VALUES ('d', 't', 'f.pdf', 's', 1, 'queued', '{}', '{}', 0, :now, :now)"),
                now)
            connection.execute(text(
                "INSERT INTO pages (id, document_id, \"index\", status, rotation, layout, timings, created_at, "
                "updated_at) VALUES (1, 'd', 0, 'succeeded', 0, 'pdf', '{}', :now, :now)"), now)
            connection.execute(text(
                "INSERT INTO regions (page_id, \"index\", reading_order, label, bbox_px, bbox_pt, status, truncated, "
                "attempts, updated_at) VALUES (1, 0, 0, 'text', '[]', '[]', 'skipped', false, 0, :now)"), now)
        command.downgrade(config, "0004")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT status FROM regions")).scalar_one() == "failed"
    finally:
        engine.dispose()
