"""The resident engine of a GPU worker is built from the settings: its batch, its memory, its graphs."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from pipeline.config import Settings
from pipeline.documents.recognizer import RecognitionTask
from pipeline.engine.model.errors import CheckpointError
from workers.engine_host import EngineHost


def test_the_host_builds_its_engine_with_the_settings_batch_and_memory(tiny_checkpoint: Path, tmp_path: Path):
    settings = Settings(model=str(tiny_checkpoint), cache_dir=tmp_path, device="cpu", max_num_seqs=5,
                        max_num_batched_tokens=1024, kv_cache_memory=16 << 20, cuda_graphs=False)
    host = EngineHost(settings)
    try:
        config = host.engine.config
        assert (config.device, config.max_num_seqs, config.max_num_batched_tokens) == ("cpu", 5, 1024)
        assert (config.kv_cache_memory, config.cuda_graphs) == (16 << 20, False)
    finally:
        host.close()


def test_the_host_leaves_an_unset_batch_to_the_engines_device_default(tiny_checkpoint: Path, tmp_path: Path):
    host = EngineHost(Settings(model=str(tiny_checkpoint), cache_dir=tmp_path, device="cpu"))
    try:
        assert host.engine.config.max_num_seqs == 32
    finally:
        host.close()


@pytest.mark.parametrize(("model", "code"), [("none", "model_none"), ("{tmp}/not-here", "model_unavailable")])
def test_a_host_without_a_model_skips_every_region_with_the_reason_caches_nothing_and_says_it_is_up(
        tmp_path: Path, model: str, code: str):
    host = EngineHost(Settings(model=model.format(tmp=tmp_path), cache_dir=tmp_path, device="cpu"))
    recognition = host.recognizer("acme").submit(RecognitionTask(Image.new("RGB", (56, 56)), "ocr")).result()
    assert (recognition.skipped, recognition.error.code) == (True, code)
    assert host.revision is None  # nothing to key the result cache by
    assert host.status.problem is None and host.status.note.startswith(f"model: {code}: ")


def test_a_host_on_a_broken_model_fails_its_regions_rather_than_skipping_them(tmp_path: Path):
    (tmp_path / "broken").mkdir()
    host = EngineHost(Settings(model=str(tmp_path / "broken"), cache_dir=tmp_path, device="cpu"))
    with pytest.raises(CheckpointError):
        host.recognizer("acme")
    assert host.status.problem.startswith("model: no_config: ")
