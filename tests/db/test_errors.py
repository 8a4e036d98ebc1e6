"""A database that cannot be used is told apart by cause: a stable code, and a message naming the URL and the fix."""

from __future__ import annotations

import pytest

from pipeline.db.errors import DatabaseUnavailable
from pipeline.db.migrate import upgrade_to_head

SERVER = "postgresql+psycopg://{user}@127.0.0.1:{port}/{database}"


@pytest.mark.parametrize(("url", "code", "fix"), [
    (SERVER.format(user="postgres", port=5432, database="quire_no_such_database"), "database_missing",
     "Create it (`createdb -h 127.0.0.1 -p 5432 -U postgres quire_no_such_database`)"),
    (SERVER.format(user="quire_no_such_role", port=5432, database="postgres"), "database_refused",
     "Check the user and password in QUIRE_DATABASE_URL"),
    (SERVER.format(user="postgres", port=1, database="quire"), "database_unreachable",
     "Start it, or fix the host, port or path in QUIRE_DATABASE_URL"),
    ("sqlite:////proc/no-such-directory/quire.db", "database_unreachable",
     "Point QUIRE_DATABASE_URL (or QUIRE_CACHE_DIR) at a writable directory"),
])
def test_upgrade_says_why_a_database_cannot_be_used(url, code, fix):
    with pytest.raises(DatabaseUnavailable) as caught:
        upgrade_to_head(url)
    assert caught.value.code == code
    assert str(caught.value).startswith(f"{url}: ") and fix in str(caught.value)


def test_a_password_never_appears_in_the_message():
    with pytest.raises(DatabaseUnavailable) as caught:
        upgrade_to_head("postgresql+psycopg://postgres:hunter2@127.0.0.1:1/quire")
    assert "hunter2" not in str(caught.value) and "postgres:***@127.0.0.1:1/quire" in str(caught.value)
