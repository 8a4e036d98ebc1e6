"""The resident engine of a GPU worker is built from the settings: its batch, its memory, its graphs."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import Settings
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
