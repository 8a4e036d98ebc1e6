"""The revision that keys cached recognition results names the weights without hashing them on every start: a hub
snapshot by its commit, a plain directory by a digest computed once and kept until a file changes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.engine.model import revision
from pipeline.engine.model.revision import checkpoint_revision
from pipeline.engine.tiny_checkpoint import TinySpec
from workers.engine_host import EngineHost

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[list[Path]]:
    """The file lists content_digest was asked to hash, in order: each entry is one full read of the weights."""
    calls: list[list[Path]] = []
    real = revision.content_digest

    def counted(files: list[Path]) -> str:
        calls.append(files)
        return real(files)

    monkeypatch.setattr(revision, "content_digest", counted)
    return calls


def test_a_hub_snapshot_is_named_by_its_commit_without_reading_the_weights(tiny_checkpoint, tmp_path, hashes):
    snapshot = tmp_path / "models--PaddlePaddle--PaddleOCR-VL" / "snapshots" / COMMIT
    shutil.copytree(tiny_checkpoint, snapshot)
    assert checkpoint_revision(snapshot, tmp_path / "revisions.json") == COMMIT
    assert hashes == []


def test_a_local_directory_is_hashed_once_then_read_from_the_cache_file(tiny_checkpoint, tmp_path, hashes):
    cache_file = tmp_path / "revisions.json"
    first = checkpoint_revision(tiny_checkpoint, cache_file)
    assert checkpoint_revision(tiny_checkpoint, cache_file) == first
    assert len(hashes) == 1 and cache_file.exists()
    assert first == revision.content_digest([tiny_checkpoint / "config.json", tiny_checkpoint / "model.safetensors"])


def test_the_revision_is_the_same_for_a_copy_and_different_for_other_weights(checkpoint_factory, tmp_path):
    original = checkpoint_factory()
    copy = shutil.copytree(original, tmp_path / "copy")
    other = checkpoint_factory(TinySpec(seed=3))
    cache_file = tmp_path / "revisions.json"
    assert checkpoint_revision(copy, cache_file) == checkpoint_revision(original, cache_file)
    assert checkpoint_revision(other, cache_file) != checkpoint_revision(original, cache_file)


def test_a_touched_file_is_hashed_again_and_changed_weights_give_a_new_revision(tiny_checkpoint, tmp_path, hashes):
    directory = shutil.copytree(tiny_checkpoint, tmp_path / "ckpt")
    cache_file = tmp_path / "revisions.json"
    before = checkpoint_revision(directory, cache_file)
    weights = directory / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert checkpoint_revision(directory, cache_file) == before and len(hashes) == 2  # same bytes, read again

    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor
    weights.write_bytes(bytes(data))
    assert checkpoint_revision(directory, cache_file) != before and len(hashes) == 3


def test_a_corrupt_cache_file_is_recomputed_not_trusted(tiny_checkpoint, tmp_path, hashes):
    cache_file = tmp_path / "revisions.json"
    cache_file.write_text("{half a json")
    assert len(checkpoint_revision(tiny_checkpoint, cache_file)) == 64 and len(hashes) == 1


def test_the_engine_host_keeps_its_digests_under_the_cache_dir(tiny_checkpoint, tmp_path, hashes):
    settings = Settings(model=str(tiny_checkpoint), cache_dir=tmp_path)
    first = EngineHost(settings).revision
    assert EngineHost(settings).revision == first  # a second worker start on this machine
    assert len(hashes) == 1 and (tmp_path / "checkpoint-revisions.json").exists()
