"""Tenants and their API keys: created and revoked from the `quire` command, checked on every API request.

A key is `qk_<prefix>_<secret>`. Only the prefix (public: listings show it, and it finds the row) and the SHA-256 of
the whole key are stored, so a leaked database gives no usable key. A fast hash is enough because the secret is 256
random bits, not a password: there is nothing to guess from the hash.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.db.models import ApiKey, Tenant, utcnow
from pipeline.webhooks import CallbackRefused, accept_callback_url

KEY_SCHEME = "qk"
MAX_KEY_LENGTH = 128  # longer than any key this module makes; longer input is not hashed at all
# A key in use updates last_used_at at most this often: one write per key per interval, not one per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
TENANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class AccountError(ValueError):
    """A request the accounts cannot honour (a malformed tenant id, an unknown tenant or key prefix)."""


@dataclass(frozen=True)
class NewKey:
    """A key just made: `key` exists nowhere else, so this is the one time it can be shown."""

    key: str
    prefix: str
    tenant: str


def ensure_tenant(session: Session, tenant_id: str) -> tuple[Tenant, bool]:
    """The tenant, created with a random webhook secret if it did not exist; (tenant, whether it was created)."""
    if not TENANT_ID.fullmatch(tenant_id):
        raise AccountError(f"tenant id {tenant_id!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a "
                           "letter or digit")
    existing = session.get(Tenant, tenant_id)
    if existing is not None:
        return existing, False
    tenant = Tenant(id=tenant_id, webhook_secret=secrets.token_urlsafe(32))
    try:
        with session.begin_nested():  # a concurrent creation of the same tenant wins; this one then reads it
            session.add(tenant)
    except IntegrityError:
        return session.get_one(Tenant, tenant_id), False
    return tenant, True


def create_key(session: Session, tenant_id: str, name: str | None = None) -> NewKey:
    """A new key for an existing tenant; its hash is stored, the key itself only returned."""
    if session.get(Tenant, tenant_id) is None:
        raise AccountError(f"no tenant {tenant_id!r}")
    prefix = f"{KEY_SCHEME}_{secrets.token_hex(6)}"
    key = f"{prefix}_{secrets.token_urlsafe(32)}"
    session.add(ApiKey(tenant=tenant_id, prefix=prefix, secret_sha256=_digest(key), name=name))
    session.flush()
    return NewKey(key, prefix, tenant_id)


def list_keys(session: Session, tenant_id: str | None = None) -> list[ApiKey]:
    """Every key (or one tenant's), oldest first, revoked ones included."""
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.prefix)
    if tenant_id is not None:
        query = query.where(ApiKey.tenant == tenant_id)
    return list(session.scalars(query))


def revoke_key(session: Session, prefix: str) -> ApiKey:
    """Revoke the key with this prefix; from the next request on it is refused. Revoking twice keeps the first time."""
    key = session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
    if key is None:
        raise AccountError(f"no key with prefix {prefix!r} (`quire keys list` shows them)")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    return key


def authenticate(session: Session, key: str) -> str | None:
    """The tenant a presented key acts for; None for a malformed, unknown or revoked key."""
    prefix = key_prefix(key)
    if prefix is None:
        return None
    row = session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
    # compare_digest: how long the comparison takes says nothing about how much of the hash matched.
    if row is None or row.revoked_at is not None or not hmac.compare_digest(row.secret_sha256, _digest(key)):
        return None
    cutoff = utcnow() - LAST_USED_RESOLUTION
    if row.last_used_at is None or row.last_used_at < cutoff:
        # Conditional, so that of concurrent requests with the same key only the first one writes.
        stale = or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < cutoff)
        session.execute(update(ApiKey).where(ApiKey.id == row.id, stale).values(last_used_at=utcnow()))
    return row.tenant


def key_prefix(key: str) -> str | None:
    """The `qk_<prefix>` start of something shaped like a key; None for anything else."""
    scheme, _, rest = key.partition("_")
    prefix_part, _, secret = rest.partition("_")
    if scheme != KEY_SCHEME or not prefix_part or not secret or len(key) > MAX_KEY_LENGTH:
        return None
    return f"{scheme}_{prefix_part}"


def set_callback_url(session: Session, tenant_id: str, url: str | None, allow: Sequence[str] = ()) -> Tenant:
    """Set (or, with None, clear) the webhook target the tenant's documents get when their upload names none.

    The URL passes the rule an upload's does (webhooks.accept_callback_url, under `allow`: QUIRE_WEBHOOK_ALLOW), so
    a default no upload could name is refused here, not found out at the first delivery."""
    if url is not None:
        try:
            accept_callback_url(url, allow)
        except CallbackRefused as exc:
            raise AccountError(f"{exc.code}: {exc}") from None
    tenant = get_tenant(session, tenant_id)
    tenant.callback_url = url
    return tenant


def get_tenant(session: Session, tenant_id: str) -> Tenant:
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise AccountError(f"no tenant {tenant_id!r}")
    return tenant


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
