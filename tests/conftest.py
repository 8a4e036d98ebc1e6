"""Session-wide tiny checkpoints (engine and layout): generated once per test session into a temp directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.documents.tiny_layout import TinyLayoutSpec, write_tiny_layout_checkpoint
from pipeline.engine.tiny_checkpoint import TinySpec, write_tiny_checkpoint


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    made: dict[TinySpec, Path] = {}

    def make(spec: TinySpec | None = None) -> Path:
        spec = spec or TinySpec()
        if spec not in made:
            made[spec] = write_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"), spec)
        return made[spec]

    return make


@pytest.fixture(scope="session")
def tiny_checkpoint(checkpoint_factory) -> Path:
    return checkpoint_factory()


@pytest.fixture(scope="session")
def layout_checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    """Tiny PP-DocLayout checkpoints (V2 by default), written once per spec per session."""
    made: dict[TinyLayoutSpec, Path] = {}

    def make(spec: TinyLayoutSpec | None = None) -> Path:
        spec = spec or TinyLayoutSpec()
        if spec not in made:
            made[spec] = write_tiny_layout_checkpoint(tmp_path_factory.mktemp("layout"), spec)
        return made[spec]

    return make
