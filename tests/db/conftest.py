"""Databases for the persistence tests: a fresh SQLite file, and a scratch database on the real Postgres.

Postgres is the one at 127.0.0.1:5432 (trust auth, user postgres) that `.ci/run` starts; the session creates a
uniquely named database through the `postgres` maintenance database and drops it at the end, so runs never see
each other's tables. Each test gets an empty database: its own SQLite file, or the scratch database's public
schema dropped and recreated.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from pipeline.db.migrate import upgrade_to_head
from pipeline.db.session import create_db_engine

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432"


@pytest.fixture(scope="session")
def postgres_scratch() -> Iterator[str]:
    """The URL of a database created for this test session on the local Postgres, dropped afterwards."""
    maintenance = create_engine(f"{POSTGRES}/postgres", isolation_level="AUTOCOMMIT")
    name = f"quire_test_{uuid.uuid4().hex[:12]}"
    try:
        with maintenance.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        maintenance.dispose()
        pytest.fail(f"Postgres at 127.0.0.1:5432 is not reachable (`.ci/run` starts it): {exc}")
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        with maintenance.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        maintenance.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path) -> str:
    """The URL of an empty database of each dialect."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'quire.db'}"
    url = request.getfixturevalue("postgres_scratch")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    return url


@pytest.fixture
def engine(empty_database: str) -> Iterator[Engine]:
    """An engine on a database of each dialect that `alembic upgrade head` has just created."""
    upgrade_to_head(empty_database)
    engine = create_db_engine(empty_database)
    yield engine
    engine.dispose()
