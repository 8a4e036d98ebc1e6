"""`quire keys` and `quire tenants` on a SQLite database, as an operator runs them; and what `quire serve` says about
keys when it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.commands import Ran, quire_here


@pytest.fixture
def quire(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """`quire ARGS` in this process on the SQLite database under the cache directory given first."""
    return lambda cache, *args: quire_here(monkeypatch, capsys, *args, cache=cache)


def ok(done: Ran) -> Ran:
    assert done.returncode == 0, done.stderr
    return done


def test_keys_are_created_listed_and_revoked_and_a_secret_is_shown_only_at_creation(tmp_path: Path, quire) -> None:
    first = ok(quire(tmp_path, "keys", "create", "--tenant", "acme", "--name", "ci"))
    key = first.stdout.strip()
    assert key.startswith("qk_") and first.stdout == key + "\n"  # stdout is the key alone: KEY=$(quire keys …)
    assert "not shown again" in first.stderr and "webhook secret" in first.stderr  # a new tenant
    second = ok(quire(tmp_path, "keys", "create", "--tenant", "acme"))
    assert "webhook secret" not in second.stderr and second.stdout.strip() != key

    listing = ok(quire(tmp_path, "keys", "list")).stdout
    lines = listing.splitlines()
    assert lines[0].split() == ["PREFIX", "TENANT", "NAME", "CREATED", "LAST", "USED", "REVOKED"]
    assert lines[1].startswith(f"{key[:15]}  acme    ci ") and lines[2].startswith(second.stdout[:15])
    assert key[16:] not in listing and second.stdout.strip()[16:] not in listing

    assert ok(quire(tmp_path, "keys", "revoke", key[:15])).stdout.startswith(f"revoked {key[:15]} (tenant acme)")
    revoked_row = ok(quire(tmp_path, "keys", "list", "--tenant", "acme")).stdout.splitlines()[1]
    assert revoked_row.startswith(key[:15]) and revoked_row.split()[-1].endswith("Z")
    database = create_engine(f"sqlite:///{tmp_path / 'quire.db'}")
    with database.connect() as connection:
        stored = " ".join(str(value) for row in connection.execute(text("SELECT * FROM api_keys")) for value in row)
    database.dispose()
    assert key not in stored and key[16:] not in stored


def test_a_tenant_shows_its_webhook_secret_and_takes_a_default_callback_url(tmp_path: Path, quire) -> None:
    created = ok(quire(tmp_path, "keys", "create", "--tenant", "globex"))
    secret = created.stderr.rsplit(": ", 1)[1].strip()
    ok(quire(tmp_path, "tenants", "set", "--callback-url", "https://hooks.example.com/quire", "globex"))
    refused = quire(tmp_path, "tenants", "set", "--callback-url", "http://10.0.0.1/x", "globex")  # as an upload is
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines() == ["error: callback_url_refused: 'http://10.0.0.1/x': 10.0.0.1 resolves to "
                                           "10.0.0.1, a private address; QUIRE_WEBHOOK_ALLOW can permit it"]
    shown = ok(quire(tmp_path, "tenants", "show", "globex")).stdout
    assert shown.splitlines() == ["tenant: globex", f"webhook secret: {secret}",
                                  "default callback URL: https://hooks.example.com/quire", "active keys: 1"]


def test_mistakes_are_one_line_errors_with_status_1(tmp_path: Path, quire) -> None:
    for args, message in ((("tenants", "show", "nobody"), "error: no tenant 'nobody'"),
                          (("keys", "revoke", "qk_000000000000"), "error: no key with prefix 'qk_000000000000'"),
                          (("keys", "create", "--tenant", "a b"), "error: tenant id 'a b'")):
        done = quire(tmp_path, *args)
        assert (done.returncode, done.stderr.strip().splitlines()[-1][:len(message)]) == (1, message)
        assert "Traceback" not in done.stderr


@pytest.mark.slow  # `quire serve` as a subprocess: its logs are configured as it starts
def test_serve_on_loopback_says_at_start_that_it_runs_without_keys(tmp_path: Path) -> None:
    """A missing model ends `quire serve` right after start; what it said about keys comes before that."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUIRE_")}
    env.update(QUIRE_CACHE_DIR=str(tmp_path), QUIRE_MODEL=str(tmp_path / "no-model"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", "--port", "1"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "no API keys: listening on 127.0.0.1 only; every request acts as tenant `default`" in (
        done.stderr.splitlines())
