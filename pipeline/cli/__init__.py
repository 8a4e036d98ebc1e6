"""The `quire` command: one module per command group (`*_command.py`, `*_commands.py`) and what
they share (common.py); this module parses the command line and runs the command.

The commands import what they run inside themselves: every `quire` command parses every command's arguments, and
`quire keys list` must not wait for torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from pipeline.cli.account_commands import add_account_parsers, keys, tenants
from pipeline.cli.common import DEMO_COMMANDS, demo_hint
from pipeline.cli.demo_command import add_demo_parser, demo
from pipeline.cli.engine_commands import add_engine_parser, add_recognize_parser, recognize, serve_engine
from pipeline.cli.model_commands import add_model_parsers, models
from pipeline.cli.process_command import add_process_parser, process
from pipeline.cli.service_commands import add_service_parsers, migrate, serve, worker


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"demo": demo, "recognize": recognize, "engine": serve_engine, "process": process, "migrate": migrate,
                "serve": serve, "worker": worker, "keys": keys, "tenants": tenants, "models": models}
    return _run(commands[args.command], args)


def _run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """The one place a model, a database or a blob store that cannot be used becomes one message and exit status 2."""
    from pipeline.db.errors import DatabaseUnavailable
    from pipeline.engine.model.errors import CheckpointError
    from pipeline.storage import BlobStoreUnavailable

    try:
        return command(args)
    except (CheckpointError, DatabaseUnavailable, BlobStoreUnavailable) as exc:
        hint = DEMO_COMMANDS.get(args.command) if exc.code == "model_unavailable" else None
        message = str(exc) + (demo_hint(hint) if hint else "")
        if args.command in ("serve", "worker"):  # their logs are configured: one line with the stable code
            logging.getLogger("quire").error(message, extra={"code": exc.code})
        else:
            print(f"error: {message}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    """Every `quire` command with its options; tests/test_deploy.py checks docker-compose.yml's commands by it."""
    parser = argparse.ArgumentParser(prog="quire", description="Document OCR on PaddleOCR-VL")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_demo_parser(commands)
    add_recognize_parser(commands)
    add_process_parser(commands)
    add_engine_parser(commands)
    add_service_parsers(commands)
    add_account_parsers(commands)
    add_model_parsers(commands)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quire")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
