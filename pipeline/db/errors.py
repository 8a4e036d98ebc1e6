"""A database that cannot be used, told as a stable code and a message naming the URL and the fix.

SQLAlchemy reports every such cause as one OperationalError whose text comes from the driver; this sorts the usual
ones (no such database, refused credentials, nothing listening) so that people and log queries can act on them.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

_REFUSED = ("password authentication failed", "no pg_hba.conf entry", "permission denied", "role \"")


class DatabaseUnavailable(RuntimeError):
    """The configured database does not exist, refuses us or does not answer; `code` is stable."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def database_unavailable(exc: OperationalError | DBAPIError, url: str) -> DatabaseUnavailable:
    """The DatabaseUnavailable for a failed connection to url (its password hidden in the message)."""
    shown = make_url(url)
    where = shown.render_as_string(hide_password=True)
    cause = _driver_message(exc)
    if "does not exist" in cause and "database" in cause:
        create = f"createdb -h {shown.host or 'localhost'} -p {shown.port or 5432} -U {shown.username} {shown.database}"
        return DatabaseUnavailable(
            f"{where}: {cause}. Create it (`{create}`) or set QUIRE_DATABASE_URL to one that exists, then run "
            "`quire migrate`.", "database_missing")
    if any(marker in cause for marker in _REFUSED):
        return DatabaseUnavailable(
            f"{where}: the server refused the connection ({cause}). Check the user and password in "
            "QUIRE_DATABASE_URL and the server's access rules (pg_hba.conf).", "database_refused")
    return DatabaseUnavailable(
        f"{where}: the database does not answer ({cause}). Start it, or fix the host, port or path in "
        "QUIRE_DATABASE_URL.", "database_unreachable")


def database_file_unusable(exc: OSError, url: str) -> DatabaseUnavailable:
    """The DatabaseUnavailable for a SQLite file whose directory cannot be made or written."""
    return DatabaseUnavailable(
        f"{url}: the database file cannot be created there ({exc.strerror or exc}). Point QUIRE_DATABASE_URL (or "
        "QUIRE_CACHE_DIR) at a writable directory.", "database_unreachable")


def _driver_message(exc: OperationalError | DBAPIError) -> str:
    """The driver's own words, one line, without psycopg's "connection failed: connection to server at …" prefix."""
    text = " ".join(str(exc.orig).split())
    return text.rpartition("FATAL: ")[2] if "FATAL: " in text else text
