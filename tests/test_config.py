"""Settings: the engine's defaults are `auto` (the device decides), and its QUIRE_* variables parse as documented."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from pipeline.config import Settings


@pytest.fixture(autouse=True)
def no_quire_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("QUIRE_")]:
        monkeypatch.delenv(key)


def read(**variables: str) -> Settings:
    """Settings from exactly these QUIRE_* variables (and no .env file)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for key, value in variables.items():
            monkeypatch.setenv(key, value)
        return Settings(_env_file=None)


def test_the_engine_defaults_leave_device_dtype_batch_and_memory_to_the_device():
    settings = read()
    assert (settings.device, settings.dtype, settings.layout_device) == ("auto", "auto", "")
    assert (settings.max_num_seqs, settings.max_num_batched_tokens, settings.kv_cache_memory) == (None, None, None)
    assert (settings.kv_cache_fraction, settings.cuda_graphs, settings.gpu_threads) == (0.8, True, None)
    assert settings.prepare_queue == "cpu"


def test_engine_variables_are_read_from_the_environment():
    settings = read(QUIRE_DEVICE="cuda:1", QUIRE_DTYPE="float16", QUIRE_MAX_NUM_SEQS="64",
                    QUIRE_MAX_NUM_BATCHED_TOKENS="2048", QUIRE_KV_CACHE_MEMORY=str(3 << 30),
                    QUIRE_KV_CACHE_FRACTION="0.5", QUIRE_CUDA_GRAPHS="0", QUIRE_LAYOUT_DEVICE="cpu",
                    QUIRE_GPU_THREADS="12", QUIRE_PREPARE_QUEUE="gpu")
    assert (settings.device, settings.dtype, settings.layout_device) == ("cuda:1", "float16", "cpu")
    assert (settings.max_num_seqs, settings.max_num_batched_tokens, settings.kv_cache_memory) == (64, 2048, 3 << 30)
    assert (settings.kv_cache_fraction, settings.cuda_graphs, settings.gpu_threads) == (0.5, False, 12)
    assert settings.prepare_queue == "gpu"


@pytest.mark.parametrize(("variable", "value"), [
    ("QUIRE_MAX_NUM_SEQS", "0"), ("QUIRE_GPU_THREADS", "-1"), ("QUIRE_KV_CACHE_MEMORY", "0"),
    ("QUIRE_KV_CACHE_FRACTION", "0"), ("QUIRE_KV_CACHE_FRACTION", "1.5"), ("QUIRE_PREPARE_QUEUE", "layout"),
])
def test_an_engine_variable_out_of_range_is_refused_at_start(variable: str, value: str):
    with pytest.raises(ValidationError, match=variable.removeprefix("QUIRE_").lower()):
        read(**{variable: value})
