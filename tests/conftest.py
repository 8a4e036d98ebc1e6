"""Session-wide resources: tiny checkpoints (engine and layout) written once into a temp directory, a scratch
database on the real Postgres (emptied for each test that asks for an empty or migrated database of each dialect),
and one resident engine host on the tiny checkpoint.

Postgres is the one at 127.0.0.1:5432 (trust auth, user postgres) that `make test` starts; the session creates a
uniquely named database through the `postgres` maintenance database and drops it at the end, so runs never see
each other's tables."""

from __future__ import annotations

import os

import torch

# Triton reads this when a kernel module is imported, so it must be set before any test module imports one.
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from pipeline.db.migrate import upgrade_to_head
from pipeline.db.session import create_db_engine
from pipeline.documents.tiny_layout import TinyLayoutSpec, write_tiny_layout_checkpoint
from pipeline.samples.tiny_checkpoint import write_tiny_checkpoint
from tests import s3
from tests.jobs.expected import service_settings
from tests.local_stack import scratch_database
from tests.tiny import TEST_SPEC
from workers.engine_host import EngineHost


def _written_once(tmp_path_factory: pytest.TempPathFactory, write, default, folder: str):
    """A factory that writes each spec's checkpoint into a temp folder on first use and reuses it after."""
    made: dict[object, Path] = {}

    def make(spec=None) -> Path:
        spec = spec or default
        if spec not in made:
            made[spec] = write(tmp_path_factory.mktemp(folder), spec)
        return made[spec]

    return make


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    return _written_once(tmp_path_factory, write_tiny_checkpoint, TEST_SPEC, "ckpt")


@pytest.fixture(scope="session")
def tiny_checkpoint(checkpoint_factory) -> Path:
    return checkpoint_factory()


@pytest.fixture(scope="session")
def layout_checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    """Tiny PP-DocLayout checkpoints (V2 by default), written once per spec per session."""
    return _written_once(tmp_path_factory, write_tiny_layout_checkpoint, TinyLayoutSpec(), "layout")


@pytest.fixture(scope="session")
def postgres_scratch() -> Iterator[str]:
    """A scratch database the persistence tests empty and refill as they like."""
    with scratch_database("quire_test") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database of each dialect: its own SQLite file, or the session's scratch Postgres database
    with its public schema dropped and recreated."""
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
def migrated_database(empty_database: str) -> Iterator[Engine]:
    """An engine on a database of each dialect that `alembic upgrade head` has just created."""
    upgrade_to_head(empty_database)
    engine = create_db_engine(empty_database)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def engine_host(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHost]:
    host = EngineHost(service_settings(tmp_path_factory.mktemp("host"), tiny_checkpoint))
    yield host
    host.close()


SLOW_PACKAGES = {"service", "fault", "web", "benchmarks", "workers"}
"""Packages whose tests start the service's processes, workers, a browser or a benchmark's stack."""
SHARED_PROCESSES = {"service", "fault", "web"}
"""Packages whose tests share processes started once (session- and package-scoped stacks)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the slow packages' tests `slow`, beside the tests marked one by one, so that `pytest -m "not slow"` is
    the quick part a developer runs between edits.

    Group the tests for pytest-xdist (`make test` runs two workers, `--dist loadgroup`): a module's tests stay on one
    worker, so its module-scoped fixtures are made once, and a package that shares started processes stays whole,
    so its stacks start once. Those packages, the longest groups, go first: the workers start on them at once and
    the many short modules fill in around them, rather than one worker running the service's tests alone at the end.
    """
    tests = Path(__file__).parent
    items.sort(key=lambda item: item.path.relative_to(tests).parts[0] not in SHARED_PROCESSES)
    for item in items:
        path = item.path.relative_to(tests)
        if path.parts[0] in SLOW_PACKAGES:
            item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(path.parts[0] if path.parts[0] in SHARED_PROCESSES else str(path)))


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A bucket of its own on the real S3 server (tests/s3.py), with this process's AWS variables pointing at it."""
    for name, value in s3.ENV.items():
        monkeypatch.setenv(name, value)
    with s3.fresh_bucket() as bucket:
        yield bucket
