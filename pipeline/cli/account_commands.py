"""`quire keys` and `quire tenants`: API keys and tenants on the configured database (QUIRE_DATABASE_URL).

`quire keys create` prints the new key alone on stdout (`KEY=$(quire keys create --tenant acme)`), and what to
know about it on stderr; the key is not stored and cannot be shown again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pipeline.config import get_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# The database parts are imported where used, as in every command: every `quire` command parses these arguments.


def add_account_parsers(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser("keys", help="create, list and revoke API keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_commands.add_parser("create", help="a new key for a tenant (created if new); shown only once")
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument("--name", default=None, help="what the key is for, shown by `quire keys list`")
    listing = keys_commands.add_parser("list", help="keys by prefix, tenant, name, dates; never the secret")
    listing.add_argument("--tenant", default=None, help="only this tenant's keys")
    revoke = keys_commands.add_parser("revoke", help="refuse a key from the next request on")
    revoke.add_argument("prefix", help="the key's prefix, as `quire keys list` shows it (qk_…)")
    tenants = commands.add_parser("tenants", help="a tenant's webhook secret and default callback URL")
    tenants_commands = tenants.add_subparsers(dest="tenants_command", required=True)
    show = tenants_commands.add_parser("show", help="the tenant's webhook secret and default callback URL")
    show.add_argument("tenant")
    change = tenants_commands.add_parser("set", help="change a tenant's settings")
    change.add_argument("--callback-url", required=True,
                        help="webhook URL for documents uploaded without callback_url; '' clears it")
    change.add_argument("tenant")


def keys(args: argparse.Namespace) -> int:
    """`quire keys …`: 0 when done, 1 for an unknown tenant, prefix or malformed tenant id."""
    actions = {"create": _create_key, "list": _list_keys, "revoke": _revoke_key}
    return _on_database(actions[args.keys_command], args)


def tenants(args: argparse.Namespace) -> int:
    """`quire tenants …`: 0 when done, 1 for an unknown tenant or a malformed URL."""
    actions = {"show": _show_tenant, "set": _set_tenant}
    return _on_database(actions[args.tenants_command], args)


def _on_database(action: Callable[[Session, argparse.Namespace], None], args: argparse.Namespace) -> int:
    """Run action in one transaction on the configured database (upgraded first, so this works before any
    `quire serve`); an AccountError is a one-line message and exit status 1, nothing written."""
    from pipeline.accounts import AccountError
    from pipeline.db.migrate import upgrade_to_head
    from pipeline.db.session import get_engine, session_scope

    url = get_settings().database_url
    upgrade_to_head(url)
    try:
        with session_scope(get_engine(url)) as session:
            action(session, args)
    except AccountError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _create_key(session: Session, args: argparse.Namespace) -> None:
    from pipeline.accounts import create_key, ensure_tenant

    tenant, created = ensure_tenant(session, args.tenant)
    new = create_key(session, tenant.id, args.name)
    print(new.key)
    print(f"API key {new.prefix} for tenant {tenant.id}: store it now, it is not shown again", file=sys.stderr)
    if created:
        print(f"new tenant {tenant.id}; its webhook secret (`quire tenants show {tenant.id}` shows it again): "
              f"{tenant.webhook_secret}", file=sys.stderr)


def _list_keys(session: Session, args: argparse.Namespace) -> None:
    from pipeline.accounts import list_keys

    rows = [("PREFIX", "TENANT", "NAME", "CREATED", "LAST USED", "REVOKED")]
    rows += [(key.prefix, key.tenant, key.name or "-", _when(key.created_at), _when(key.last_used_at),
              _when(key.revoked_at)) for key in list_keys(session, args.tenant)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _revoke_key(session: Session, args: argparse.Namespace) -> None:
    from pipeline.accounts import revoke_key

    key = revoke_key(session, args.prefix)
    print(f"revoked {key.prefix} (tenant {key.tenant}) at {_when(key.revoked_at)}")


def _show_tenant(session: Session, args: argparse.Namespace) -> None:
    from pipeline.accounts import get_tenant, list_keys

    tenant = get_tenant(session, args.tenant)
    active = sum(key.revoked_at is None for key in list_keys(session, tenant.id))
    print(f"tenant: {tenant.id}\nwebhook secret: {tenant.webhook_secret}\n"
          f"default callback URL: {tenant.callback_url or '-'}\nactive keys: {active}")


def _set_tenant(session: Session, args: argparse.Namespace) -> None:
    from pipeline.accounts import set_callback_url

    tenant = set_callback_url(session, args.tenant, args.callback_url or None, get_settings().webhook_allow)
    print(f"tenant {tenant.id}: default callback URL {tenant.callback_url or 'cleared'}")


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ") if moment else "-"
