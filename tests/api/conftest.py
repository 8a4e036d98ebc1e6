"""An API over a SQLite file and a blob directory in tmp_path, for one tenant ("acme").

No worker runs: the dispatcher only records what the API sends, because these tests are about the HTTP contract;
the stage tests drive the real workers. Where a test needs a document further along, it writes the rows and blobs
the workers would have written.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy import Engine

from api.app import create_app
from pipeline.config import Settings
from pipeline.db.migrate import upgrade_to_head
from pipeline.db.session import create_db_engine
from pipeline.jobs.context import open_context
from pipeline.jobs.dispatch import Stage
from pipeline.storage import LocalBlobStore

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"
FOUR_PAGES = "pdflatex-4-pages.pdf"
MAX_UPLOAD_BYTES = 100_000  # the corpus PDFs are 2–80 kB


@dataclass
class RecordingDispatcher:
    """A stand-in for Celery or the embedded workers that only remembers what was sent."""

    sent: list[tuple[Stage, str | int]] = field(default_factory=list)

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        self.sent.append((stage, key))


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database file at the newest schema, migrated once and copied for each test (Alembic takes a while)."""
    path = tmp_path_factory.mktemp("template") / "quire.db"
    upgrade_to_head(f"sqlite:///{path}")
    return path


@pytest.fixture
def settings(tmp_path: Path, migrated_template: Path) -> Settings:
    shutil.copy(migrated_template, tmp_path / "quire.db")
    return Settings(cache_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'quire.db'}",
                    blob_dir=tmp_path / "blobs", max_upload_bytes=MAX_UPLOAD_BYTES)


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def app(settings: Settings, dispatcher: RecordingDispatcher) -> Iterator[FastAPI]:
    """The API over its own Context, built as `quire serve` builds one."""
    context = open_context(settings, dispatcher)
    yield create_app(context, tenant="acme")
    context.close()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


@pytest.fixture
def db(settings: Settings) -> Iterator[Engine]:
    """A second engine on the app's database, for what the workers would read and write."""
    engine = create_db_engine(settings.database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def blobs(settings: Settings) -> LocalBlobStore:
    assert settings.blob_dir is not None
    return LocalBlobStore(settings.blob_dir)


def corpus(name: str = FOUR_PAGES) -> bytes:
    return (CORPUS / name).read_bytes()


def png(width: int = 8, height: int = 8, color: str = "white") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "PNG")
    return buffer.getvalue()


def upload(client: TestClient, data: bytes, filename: str = "report.pdf", key: str | None = None,
           **options: str | list[str]):
    """POST /v1/documents with data as the file part and options as form fields (a list repeats the field)."""
    headers = {"Idempotency-Key": key} if key else {}
    return client.post("/v1/documents", files={"file": (filename, data, "application/octet-stream")},
                       data=options, headers=headers)


def stored_files(root: Path) -> list[Path]:
    """Every file under the blob directory, temporary files included."""
    return sorted(path for path in root.rglob("*") if path.is_file())
