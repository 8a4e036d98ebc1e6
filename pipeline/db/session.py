"""Engines and sessions from a database URL: a SQLite file in the embedded mode, Postgres when scaled out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from ..config import get_settings


def create_db_engine(url: str) -> Engine:
    """An engine for url; SQLite gets its parent directory created, foreign keys on, WAL and immediate transactions.

    SQLite ignores foreign keys (and so ON DELETE CASCADE) unless each connection turns them on, and its default
    rollback journal blocks readers while a worker writes; WAL lets the API read during a worker's transaction.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or parsed.query.get("mode") == "memory"
    if not in_memory:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # Threads share the engine in the embedded mode; the pool hands each connection to one thread at a time.
    # isolation_level=None hands transaction control to the `begin` hook below.
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30, "isolation_level": None})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        # A deferred transaction that reads and then writes fails at once (SQLITE_BUSY, no waiting) when another
        # connection wrote in between; taking the write lock at BEGIN makes concurrent workers queue instead.
        # A `reading` connection begins nothing: its reads must not hold the write lock.
        if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


@lru_cache(maxsize=8)
def get_engine(url: str | None = None) -> Engine:
    """The process's engine for url (default: Settings.database_url), created once: engines own connection pools."""
    return create_db_engine(url or get_settings().database_url)


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    """Sessions on engine (default: the configured database); objects stay readable after commit."""
    return sessionmaker(bind=engine or get_engine(), expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """One unit of work: commits when the block ends, rolls back if it raises, always closes."""
    session = session_factory(engine)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for reads that need no transaction: each statement sees what was committed when it ran, with no
    BEGIN and COMMIT round trips around it. For a hot path's reads that writes re-check under a lock anyway."""
    with engine.connect() as connection:
        yield connection.execution_options(isolation_level="AUTOCOMMIT")
