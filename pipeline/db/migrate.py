"""Alembic driven from code: `quire migrate` and the tests upgrade a database without alembic.ini."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from ..config import get_settings
from .errors import database_file_unusable, database_unavailable

# migrations/ sits at the repository root, beside pipeline/ (the package is installed editable from the checkout).
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """An Alembic config for migrations/ on url (default: Settings.database_url) or on an open connection."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolates `%`
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade_to_head(url: str | None = None) -> None:
    """Bring the database at url (default: the configured one) to the newest schema; a no-op when it is there.
    DatabaseUnavailable says why when the database cannot be reached (the first thing serve and worker do)."""
    try:
        command.upgrade(alembic_config(url), "head")
    except OperationalError as exc:
        raise database_unavailable(exc, url or get_settings().database_url) from exc
    except OSError as exc:  # a SQLite file's directory that cannot be made
        raise database_file_unusable(exc, url or get_settings().database_url) from exc
