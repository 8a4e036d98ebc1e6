"""Databases for the persistence tests: a fresh SQLite file, and a scratch database on the real Postgres.

Postgres is the session's scratch database (tests/conftest.py). Each test gets an empty database: its own SQLite
file, or the scratch database's public schema dropped and recreated.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from pipeline.db.migrate import upgrade_to_head
from pipeline.db.session import create_db_engine


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
