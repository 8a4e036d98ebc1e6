"""The recognition model is loaded one way, for `quire process` and for a GPU worker alike: the settings' engine,
and the revision that keys the result cache (the weights' scheme in it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.engine.model.errors import CheckpointError
from pipeline.model_loading import load_engine, model_revision
from workers.engine_host import EngineHost


def test_a_gpu_worker_keys_its_results_by_the_revision_quire_process_records(tiny_checkpoint: Path, tmp_path: Path):
    settings = Settings(model=str(tiny_checkpoint), cache_dir=tmp_path, device="cpu")
    revision = model_revision(str(tiny_checkpoint), settings)
    assert EngineHost(settings).revision == revision
    quantized = settings.model_copy(update={"quantization": "int8"})
    assert model_revision(str(tiny_checkpoint), quantized) != revision  # never recalls full precision's results


def test_the_engine_is_built_as_the_settings_say(tiny_checkpoint: Path, tmp_path: Path):
    engine = load_engine(str(tiny_checkpoint), Settings(cache_dir=tmp_path, device="cpu", max_num_seqs=3))
    try:
        assert (engine.config.device, engine.config.max_num_seqs) == ("cpu", 3)
    finally:
        engine.close()


def test_a_checkpoint_that_does_not_load_raises_with_its_code(tmp_path: Path):
    (tmp_path / "broken").mkdir()
    with pytest.raises(CheckpointError) as raised:
        load_engine(str(tmp_path / "broken"), Settings(cache_dir=tmp_path, device="cpu"))
    assert raised.value.code == "no_config"
