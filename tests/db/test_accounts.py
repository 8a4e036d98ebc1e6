"""Tenants and API keys on SQLite and the real Postgres: a key is stored only as its hash, authenticates its tenant
until revoked, and nothing else authenticates anybody."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select, text

from pipeline.accounts import (
    AccountError,
    authenticate,
    create_key,
    ensure_tenant,
    get_tenant,
    list_keys,
    revoke_key,
    set_callback_url,
)
from pipeline.db.models import ApiKey, utcnow
from pipeline.db.session import session_scope


def new_key(engine: Engine, tenant: str = "acme", name: str | None = None) -> str:
    with session_scope(engine) as session:
        ensure_tenant(session, tenant)
        return create_key(session, tenant, name).key


def tenant_of(engine: Engine, key: str) -> str | None:
    with session_scope(engine) as session:
        return authenticate(session, key)


def test_a_key_authenticates_its_tenant_and_only_its_hash_is_stored(engine: Engine) -> None:
    key = new_key(engine, name="ci")
    assert key.startswith("qk_") and len(key) > 40
    assert tenant_of(engine, key) == "acme"
    with engine.connect() as connection:
        stored = [str(value) for row in connection.execute(text("SELECT * FROM api_keys")) for value in row]
    assert not any(key in value or key.split("_", 2)[2] in value for value in stored)
    with session_scope(engine) as session:
        row = session.scalars(select(ApiKey)).one()
        assert row.secret_sha256 == hashlib.sha256(key.encode()).hexdigest()
        assert (row.prefix, row.tenant, row.name) == (key[:15], "acme", "ci")


def test_every_key_is_different_and_each_finds_its_own_tenant(engine: Engine) -> None:
    keys = {tenant: [new_key(engine, tenant) for _ in range(2)] for tenant in ("acme", "globex")}
    assert len({key for pair in keys.values() for key in pair}) == 4
    assert {tenant: [tenant_of(engine, key) for key in pair] for tenant, pair in keys.items()} == {
        "acme": ["acme", "acme"], "globex": ["globex", "globex"]}


def test_a_revoked_key_authenticates_nobody_and_its_tenants_other_keys_still_work(engine: Engine) -> None:
    revoked, kept = new_key(engine), new_key(engine)
    with session_scope(engine) as session:
        first = revoke_key(session, revoked[:15]).revoked_at
    with session_scope(engine) as session:
        assert revoke_key(session, revoked[:15]).revoked_at == first  # revoking again keeps the first time
    assert (tenant_of(engine, revoked), tenant_of(engine, kept)) == (None, "acme")
    with session_scope(engine) as session, pytest.raises(AccountError, match="no key with prefix"):
        revoke_key(session, "qk_000000000000")


def test_unknown_malformed_and_altered_keys_authenticate_nobody(engine: Engine) -> None:
    key = new_key(engine)
    prefix, secret = key[:15], key[16:]
    altered = [f"{prefix}_{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}", f"{prefix}_", f"{prefix}_{secret}x",
               f"qk_000000000000_{secret}", f"xk_{key[3:]}", key.upper(), key + "_" + "x" * 200]
    malformed = ["", "qk", "qk_", "qk__secret", prefix, "Bearer " + key, "x" * 500]
    assert [tenant_of(engine, candidate) for candidate in altered + malformed] == [None] * 14


def test_last_used_is_written_on_first_use_then_at_most_once_a_minute(engine: Engine) -> None:
    key = new_key(engine)

    def last_used():
        with session_scope(engine) as session:
            return session.scalars(select(ApiKey.last_used_at)).one()

    assert last_used() is None
    tenant_of(engine, key)
    first = last_used()
    assert first is not None
    tenant_of(engine, key)
    assert last_used() == first
    with session_scope(engine) as session:
        session.scalars(select(ApiKey)).one().last_used_at = utcnow() - timedelta(minutes=2)
    tenant_of(engine, key)
    assert last_used() > first


def test_a_tenant_is_created_once_with_its_own_random_webhook_secret(engine: Engine) -> None:
    with session_scope(engine) as session:
        acme, created = ensure_tenant(session, "acme")
        again, created_again = ensure_tenant(session, "acme")
        globex, _ = ensure_tenant(session, "globex")
        assert (created, created_again, again.webhook_secret) == (True, False, acme.webhook_secret)
        assert len(acme.webhook_secret) >= 40 and acme.webhook_secret != globex.webhook_secret


def test_concurrent_creations_of_one_tenant_agree_on_one_row(engine: Engine) -> None:
    start, results = threading.Barrier(6), []

    def create() -> None:
        start.wait()
        with session_scope(engine) as session:
            tenant, created = ensure_tenant(session, "acme")
            results.append((tenant.webhook_secret, created))

    threads = [threading.Thread(target=create) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6
    assert len({secret for secret, _ in results}) == 1 and sum(created for _, created in results) == 1


@pytest.mark.parametrize("tenant_id", ["", "-acme", "acme corp", "a/b", "é", "x" * 129])
def test_a_tenant_id_is_letters_digits_dots_dashes_and_underscores(engine: Engine, tenant_id: str) -> None:
    with session_scope(engine) as session, pytest.raises(AccountError, match="tenant id"):
        ensure_tenant(session, tenant_id)


def test_keys_and_settings_need_an_existing_tenant(engine: Engine) -> None:
    for action in (lambda session: create_key(session, "nobody"), lambda session: get_tenant(session, "nobody"),
                   lambda session: set_callback_url(session, "nobody", "https://example.com/hook")):
        with session_scope(engine) as session, pytest.raises(AccountError, match="no tenant 'nobody'"):
            action(session)


def test_keys_are_listed_oldest_first_per_tenant_or_all(engine: Engine) -> None:
    keys = [new_key(engine, tenant) for tenant in ("acme", "globex", "acme")]
    with session_scope(engine) as session:
        assert [row.prefix for row in list_keys(session)] == [key[:15] for key in keys]
        assert [row.prefix for row in list_keys(session, "acme")] == [keys[0][:15], keys[2][:15]]


def test_a_default_callback_url_is_an_absolute_http_url_and_can_be_cleared(engine: Engine) -> None:
    new_key(engine)
    with session_scope(engine) as session:
        assert set_callback_url(session, "acme", "https://hooks.example.com/quire").callback_url == (
            "https://hooks.example.com/quire")
        for bad in ("hooks.example.com/quire", "ftp://example.com/x", "https://", "/relative"):
            with pytest.raises(AccountError, match="absolute http"):
                set_callback_url(session, "acme", bad)
        assert set_callback_url(session, "acme", None).callback_url is None
