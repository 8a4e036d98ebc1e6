"""Who a request acts for: the tenant of its `Authorization: Bearer` key, or one fixed tenant when keys are off.

Keys are off only where nobody else can connect: `QUIRE_API_KEYS=auto` (the default) turns them off when the API
listens on a loopback address alone, and `quire serve` says so at start.
"""

from __future__ import annotations

import ipaddress

from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from api.errors import ApiError
from pipeline.accounts import authenticate
from pipeline.config import ApiKeysMode
from pipeline.db.session import session_scope

KEYLESS_TENANT = "default"  # every request's tenant when keys are off

bearer = HTTPBearer(auto_error=False, description="An API key from `quire keys create --tenant NAME`")


def tenant_for_key(db: Engine, credentials: HTTPAuthorizationCredentials | None) -> str:
    """The key's tenant; 401 `unauthorized` for a missing, malformed, unknown or revoked key."""
    if credentials is None:
        raise _unauthorized("an API key is required: send `Authorization: Bearer <key>`", "Bearer")
    with session_scope(db) as session:
        tenant = authenticate(session, credentials.credentials)
    if tenant is None:
        raise _unauthorized("the API key is not valid: unknown, revoked or malformed", 'Bearer error="invalid_token"')
    return tenant


def _unauthorized(message: str, challenge: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": challenge})


def keys_required(mode: ApiKeysMode, host: str) -> bool:
    """Whether an API listening on host asks for keys: always, never, or (auto) unless host is loopback."""
    return mode == "required" or (mode == "auto" and not is_loopback(host))


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`: only this machine can connect. A name other than localhost is not trusted
    to resolve to loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def startup_notice(mode: ApiKeysMode, host: str) -> str:
    """The line `quire serve` prints about keys: a warning when anyone may connect without one."""
    if keys_required(mode, host):
        return "API keys required: `quire keys create --tenant NAME` makes one; send it as `Authorization: Bearer`"
    if is_loopback(host):
        return f"no API keys: listening on {host} only; every request acts as tenant `{KEYLESS_TENANT}`"
    return (f"WARNING: QUIRE_API_KEYS=off while listening on {host}: anyone who can reach this port can read and "
            f"delete every document (all requests act as tenant `{KEYLESS_TENANT}`)")
