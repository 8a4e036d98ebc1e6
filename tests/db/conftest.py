"""The persistence tests run on a database of each dialect that `alembic upgrade head` has just created
(tests/conftest.py's `migrated_database`: a fresh SQLite file, or the scratch Postgres database emptied)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine


@pytest.fixture
def engine(migrated_database: Engine) -> Engine:
    return migrated_database
