"""`quire ARGS` run in the test's own process, for command tests whose subject is what a command does and says, not
the process around it: a subprocess spends 2-3 s importing torch and transformers before it starts, and the suite
runs many commands. A command that raised would fail its test with the traceback, so "no traceback" holds here as
it does in a subprocess. Tests of what only a process shows (exit on a signal, logs configured at start, a bad
command line's traceback-free exit) run `python -m pipeline.cli` instead."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub.constants
import pytest

from pipeline import cli


@dataclass(frozen=True)
class Ran:
    """What a command left: its exit status and what it printed, as subprocess.run's result names them."""

    returncode: int
    stdout: str
    stderr: str


def quire_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, cache: Path,
               **env_vars: str) -> Ran:
    """`quire ARGS` with no QUIRE_* setting but the cache directory and env_vars, and the hub offline (this machine
    cannot reach it; a hub id then fails at once, as with HF_HUB_OFFLINE=1)."""
    with monkeypatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("QUIRE_")]:
            patch.delenv(key)
        for key, value in {"QUIRE_CACHE_DIR": str(cache), **env_vars}.items():
            patch.setenv(key, value)
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        capsys.readouterr()
        try:
            status = cli.main(list(args))
        except SystemExit as exit_:  # argparse's refusals
            status = exit_.code if isinstance(exit_.code, int) else 1
        printed = capsys.readouterr()
    return Ran(status, printed.out, printed.err)
