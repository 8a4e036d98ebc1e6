"""Session-wide tiny checkpoints: generated once per test session into a temp directory."""

from __future__ import annotations

from pathlib import Path

import pytest

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
