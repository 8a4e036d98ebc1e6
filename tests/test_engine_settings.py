"""From settings to the engine: its keywords, the pages kept in recognition to fill its batch, the layout device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from pipeline.config import Settings
from pipeline.engine.core import EngineConfig
from pipeline.engine.devices import resolve_dtype
from pipeline.engine.engine import Engine
from pipeline.engine_settings import (
    engine_kwargs,
    gpu_threads,
    layout_device,
    max_num_seqs,
    task_max_tokens,
    weights_scheme,
)

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="says what `auto` is on a machine without a GPU")


@pytest.fixture(autouse=True)
def no_quire_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("QUIRE_")]:
        monkeypatch.delenv(key)


def test_engine_kwargs_carry_every_engine_setting_under_the_engines_names():
    settings = Settings(device="cuda", dtype="bfloat16", max_num_seqs=128, max_num_batched_tokens=2048,
                        kv_cache_memory=1 << 30, kv_cache_fraction=0.6, prefix_cache_tokens=4096, cuda_graphs=False,
                        quantization="int4", quantization_group_size=32, onednn_cache_entries=64)
    assert engine_kwargs(settings) == {
        "device": "cuda", "dtype": "bfloat16", "max_num_seqs": 128, "max_num_batched_tokens": 2048,
        "kv_cache_memory": 1 << 30, "gpu_memory_fraction": 0.6, "prefix_cache_tokens": 4096, "cuda_graphs": False,
        "quantization": "int4", "group_size": 32, "onednn_cache_entries": 64}
    assert EngineConfig(**engine_kwargs(settings)).gpu_memory_fraction == 0.6


def test_quantized_weights_are_part_of_the_revision_that_keys_cached_results():
    assert [weights_scheme(Settings(quantization=q)) for q in ("none", "int8", "int4")] == ["none", "int8", "int4-g64"]
    assert weights_scheme(Settings(quantization="int4", quantization_group_size=128)) == "int4-g128"


@needs_no_gpu
def test_the_default_settings_build_a_cpu_engine_at_the_processors_dtype_here(tiny_checkpoint: Path):
    engine = Engine.from_pretrained(tiny_checkpoint, **engine_kwargs(Settings(_env_file=None)))
    try:
        assert (engine.config.device, engine.config.max_num_seqs) == ("cpu", 32)
        assert engine.config.max_num_batched_tokens == 4096
        assert next(engine.model.parameters()).dtype == resolve_dtype("auto", torch.device("cpu"))
    finally:
        engine.close()


def test_gpu_threads_follow_the_engines_batch_unless_set():
    assert (max_num_seqs(Settings(device="cuda")), gpu_threads(Settings(device="cuda"))) == (256, 64)
    assert (max_num_seqs(Settings(device="cpu")), gpu_threads(Settings(device="cpu"))) == (32, 8)
    assert gpu_threads(Settings(max_num_seqs=96)) == 24
    assert gpu_threads(Settings(max_num_seqs=4)) == 8  # never below what a CPU engine needs
    assert gpu_threads(Settings(device="cuda", gpu_threads=3)) == 3


def test_the_layout_runs_on_the_engines_device_unless_told_otherwise():
    assert layout_device(Settings(device="cuda:1")) == "cuda:1"
    assert layout_device(Settings(device="cuda", layout_device="cpu")) == "cpu"
    assert layout_device(Settings(device="cuda", layout_device="cuda:2")) == "cuda:2"


@needs_no_gpu
def test_auto_is_the_cpu_for_the_engine_threads_and_layout_here():
    assert (max_num_seqs(Settings()), gpu_threads(Settings()), layout_device(Settings())) == (32, 8, "cpu")
    assert layout_device(Settings(device="cuda", layout_device="auto")) == "cpu"


def test_regions_may_generate_8192_tokens_except_where_a_task_is_short_by_nature():
    assert task_max_tokens(Settings()) == {"ocr": 8192, "table": 8192, "formula": 4096, "chart": 8192,
                                           "spotting": 8192, "seal": 1024}


def test_each_task_can_be_given_its_own_limit_and_a_command_flag_sets_all(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("QUIRE_TASK_MAX_TOKENS", '{"table": 16384, "seal": 256}')
    monkeypatch.setenv("QUIRE_MAX_TOKENS", "2048")
    limits = task_max_tokens(Settings())
    assert (limits["table"], limits["seal"], limits["ocr"], limits["formula"]) == (16384, 256, 2048, 2048)
    assert set(task_max_tokens(Settings(), override=7).values()) == {7}


def test_a_task_max_tokens_for_an_unknown_task_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("QUIRE_TASK_MAX_TOKENS", '{"tables": 100}')
    with pytest.raises(ValueError, match="tables"):
        Settings()
