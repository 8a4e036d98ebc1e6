"""Session-wide tiny checkpoints (engine and layout): generated once per test session into a temp directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.documents.tiny_layout import TinyLayoutSpec, write_tiny_layout_checkpoint
from pipeline.engine.tiny_checkpoint import TinySpec, write_tiny_checkpoint


def _written_once(tmp_path_factory: pytest.TempPathFactory, write, default, folder: str):
    """A factory that writes each spec's checkpoint into a temp folder on first use and reuses it after."""
    made: dict[object, Path] = {}

    def make(spec=None) -> Path:
        spec = spec or default
        if spec not in made:
            made[spec] = write(tmp_path_factory.mktemp(folder), spec)
        return made[spec]

    return make


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    return _written_once(tmp_path_factory, write_tiny_checkpoint, TinySpec(), "ckpt")


@pytest.fixture(scope="session")
def tiny_checkpoint(checkpoint_factory) -> Path:
    return checkpoint_factory()


@pytest.fixture(scope="session")
def layout_checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    """Tiny PP-DocLayout checkpoints (V2 by default), written once per spec per session."""
    return _written_once(tmp_path_factory, write_tiny_layout_checkpoint, TinyLayoutSpec(), "layout")
