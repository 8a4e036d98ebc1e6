"""The revision that keys cached recognition results names the weights without reading them whole: a hub snapshot
by its commit, a plain directory by a fingerprint of its config, headers and a sample of every tensor."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from safetensors import safe_open

from pipeline.config import Settings
from pipeline.engine.model import revision
from pipeline.engine.model.revision import SAMPLE_BYTES, checkpoint_revision
from tests.tiny import tiny_spec
from workers.engine_host import EngineHost

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many bytes each fingerprint read, in order."""
    reads: list[int] = []
    real = revision._sampled_ranges

    def counted(path: Path, handle) -> list[tuple[int, int]]:
        ranges = list(real(path, handle))
        reads.append(sum(length for _, length in ranges))
        return ranges

    monkeypatch.setattr(revision, "_sampled_ranges", counted)
    return reads


def test_a_hub_snapshot_is_named_by_its_commit_without_reading_the_weights(tiny_checkpoint, tmp_path, bytes_read):
    snapshot = tmp_path / "models--PaddlePaddle--PaddleOCR-VL" / "snapshots" / COMMIT
    shutil.copytree(tiny_checkpoint, snapshot)
    assert checkpoint_revision(snapshot) == COMMIT
    assert bytes_read == []


def test_a_local_directory_reads_a_sample_of_each_tensor_not_the_whole_file(tiny_checkpoint, bytes_read):
    weights = tiny_checkpoint / "model.safetensors"
    with safe_open(weights, framework="pt") as f:
        tensors = len(list(f.keys()))
    checkpoint_revision(tiny_checkpoint)
    config_bytes, weight_bytes = bytes_read
    assert config_bytes == (tiny_checkpoint / "config.json").stat().st_size
    assert weight_bytes < tensors * 3 * SAMPLE_BYTES + 64 * 1024 < weights.stat().st_size


def test_the_revision_is_the_same_for_a_copy_and_different_for_other_weights(checkpoint_factory, tmp_path):
    original = checkpoint_factory()
    copy = shutil.copytree(original, tmp_path / "copy")
    other = checkpoint_factory(tiny_spec(seed=3))
    assert checkpoint_revision(copy) == checkpoint_revision(original)
    assert checkpoint_revision(other) != checkpoint_revision(original)


@pytest.mark.parametrize("where", [0.0, 0.5, 1.0], ids=["first", "middle", "last"])
def test_changed_weights_give_a_new_revision(tiny_checkpoint, tmp_path, where):
    """Changing a tensor's elements (as training does, everywhere in it) changes its samples: the largest tensor's
    first, middle or last element stands for it."""
    directory = shutil.copytree(tiny_checkpoint, tmp_path / "ckpt")
    before = checkpoint_revision(directory)
    weights = directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    begin, end = _largest_tensor(weights)
    data[begin + int(where * (end - begin - 1))] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert checkpoint_revision(directory) != before


def test_a_changed_config_gives_a_new_revision(tiny_checkpoint, tmp_path):
    directory = shutil.copytree(tiny_checkpoint, tmp_path / "ckpt")
    before = checkpoint_revision(directory)
    (directory / "config.json").write_text((directory / "config.json").read_text().replace("}", ', "x": 1}', 1))
    assert checkpoint_revision(directory) != before


def test_the_engine_host_names_its_weights_on_start(tiny_checkpoint):
    assert EngineHost(Settings(model=str(tiny_checkpoint))).revision == checkpoint_revision(tiny_checkpoint)


def _largest_tensor(weights: Path) -> tuple[int, int]:
    """Absolute byte range of the file's largest tensor."""
    with weights.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    ranges = [entry["data_offsets"] for name, entry in header.items() if name != "__metadata__"]
    begin, end = max(ranges, key=lambda r: r[1] - r[0])
    return 8 + length + begin, 8 + length + end


def test_weights_quantized_as_they_load_have_a_revision_of_their_own(tiny_checkpoint):
    float_revision = checkpoint_revision(tiny_checkpoint)
    assert checkpoint_revision(tiny_checkpoint, "int4-g64") == f"{float_revision}+int4-g64"
    settings = Settings(model=str(tiny_checkpoint), quantization="int8")
    assert EngineHost(settings).revision == f"{float_revision}+int8"
