"""Alembic environment: which database, and the models' metadata for autogenerate.

The database is, in order: a connection handed over in config.attributes["connection"] (tests, `quire
migrate` inside a transaction), `-x url=...` on the command line, sqlalchemy.url set on the config, and
otherwise Settings.database_url, so `alembic upgrade head` and the service always agree on the database.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection, text

from pipeline.config import get_settings
from pipeline.db.models import Base, UTCDateTime
from pipeline.db.session import create_db_engine

config = context.config
MIGRATION_LOCK = 0x5175697265  # "Quire": the advisory lock that serialises concurrent `upgrade head` runs
if config.config_file_name is not None:  # run as `alembic ...` with alembic.ini: its logging says what ran
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    return context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url") or \
        get_settings().database_url


def render_item(kind: str, item: Any, autogen_context: AutogenContext) -> str | bool:
    """Autogenerate writes UTCDateTime as the plain column type it creates, so revisions never import the models."""
    if kind == "type" and isinstance(item, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_on(connection: Connection) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
    context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True,
                      render_item=render_item, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":  # API and workers start together: one migrates, the rest wait
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = create_db_engine(database_url())
    try:
        with engine.connect() as connection:
            run_on(connection)
    finally:
        engine.dispose()


def run_migrations_offline() -> None:
    """`alembic upgrade head --sql`: the DDL as a script, for a DBA to read or run."""
    url = database_url()
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
