"""The loader reads both key layouts, ties or unties the head, and names what is wrong with a bad file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline.engine.engine import Engine
from pipeline.engine.model.loader import CheckpointError, load_model, resolve_checkpoint
from tests.engine.model.test_parity import _our_logits
from tests.reference import hf_logits, random_image, user_turn
from tests.tiny import tiny_spec

MESSAGES = user_turn("OCR:", [random_image(90, 70, seed=9)])


def _logits(directory: Path) -> torch.Tensor:
    return _our_logits(Engine.from_pretrained(directory, dtype="float32"), MESSAGES)


def test_hub_and_transformers_layouts_load_to_identical_logits(checkpoint_factory):
    hub = checkpoint_factory(tiny_spec(layout="hub"))
    tf5 = checkpoint_factory(tiny_spec(layout="transformers"))
    assert any(k.startswith("model.language_model.") for k in load_file(tf5 / "model.safetensors"))
    assert torch.equal(_logits(hub), _logits(tf5))


def test_tied_head_uses_the_embeddings_and_matches_transformers(checkpoint_factory):
    tied = checkpoint_factory(tiny_spec(tied=True, seed=1))
    model = load_model(tied)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert (_logits(tied) - hf_logits(tied, MESSAGES)).abs().max() <= 1e-4


def test_untied_head_uses_lm_head_weight(tiny_checkpoint):
    model = load_model(tiny_checkpoint)
    stored = load_file(tiny_checkpoint / "model.safetensors")["lm_head.weight"]
    assert torch.equal(model.lm_head.weight, stored)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()


def test_unused_tensor_groups_are_ignored(tiny_checkpoint):
    keys = load_file(tiny_checkpoint / "model.safetensors").keys()
    assert any("packing_position_embedding" in k for k in keys) and any(".head." in k for k in keys)
    names = dict(load_model(tiny_checkpoint).named_parameters())
    assert not any("packing" in n or ".head." in n for n in names)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_loads_in_each_dtype_with_nothing_left_on_meta(tiny_checkpoint, dtype):
    model = load_model(tiny_checkpoint, dtype=dtype)
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert not any(p.is_meta for p in model.parameters())


def test_a_loaded_model_keeps_no_checkpoint_file_mapped(tiny_checkpoint):
    """Tensors in the file's dtype are copied, not viewed: a view would keep the whole file mapped, counted in the
    process's memory (and a container's) beside the weights."""
    model = load_model(tiny_checkpoint, dtype=torch.float32)  # the tiny checkpoint is stored in fp32
    assert str(tiny_checkpoint / "model.safetensors") not in Path("/proc/self/maps").read_text()
    assert not any(p.is_meta for p in model.parameters())


def test_sharded_checkpoint_with_index_loads_the_same(tiny_checkpoint, tmp_path):
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    tensors = load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, part in shards.items():
        save_file({k: tensors[k] for k in part}, str(tmp_path / name))
    index = {"weight_map": {k: name for name, part in shards.items() for k in part}}
    (tmp_path / "model.safetensors.index.json").write_text(__import__("json").dumps(index))
    assert torch.equal(_logits(tmp_path), _logits(tiny_checkpoint))


def _broken(tiny_checkpoint: Path, tmp_path: Path, edit) -> Path:
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    tensors = load_file(tmp_path / "model.safetensors")
    edit(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


def test_missing_tensor_is_named(tiny_checkpoint, tmp_path):
    bad = _broken(tiny_checkpoint, tmp_path, lambda t: t.pop("model.norm.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor model\.norm\.weight"):
        load_model(bad)


def test_unexpected_tensor_is_named_with_its_file(tiny_checkpoint, tmp_path):
    bad = _broken(tiny_checkpoint, tmp_path, lambda t: t.update({"model.extra.weight": torch.zeros(2)}))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: unexpected tensor model\.extra\.weight"):
        load_model(bad)


def test_wrongly_shaped_tensor_is_named_with_both_shapes(tiny_checkpoint, tmp_path):
    bad = _broken(tiny_checkpoint, tmp_path, lambda t: t.update({"model.norm.weight": torch.ones(3)}))
    with pytest.raises(CheckpointError, match=r"model\.norm\.weight has shape \(3,\), expected \(64,\)"):
        load_model(bad)


def test_unknown_hub_id_offline_says_how_to_get_weights(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="quire demo"):
        resolve_checkpoint("PaddlePaddle/definitely-not-cached-here")


def test_missing_local_directory_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        resolve_checkpoint(tmp_path / "nowhere")


def test_a_directory_without_config_json_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(CheckpointError, match=rf"{tmp_path / 'config.json'}: not found.*quire models pull") as caught:
        load_model(tmp_path)
    assert caught.value.code == "no_config"


def test_an_unreadable_config_is_a_bad_config(tiny_checkpoint, tmp_path):
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    (tmp_path / "config.json").write_text('{"vocab_size": ')
    with pytest.raises(CheckpointError, match=r"config\.json: not readable JSON") as caught:
        load_model(tmp_path)
    assert caught.value.code == "bad_config"


def test_another_architecture_is_refused_by_name(tiny_checkpoint, tmp_path):
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "llama",
                                                      "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(CheckpointError, match=r"model_type 'llama' \(LlamaForCausalLM\) is not PaddleOCR-VL") as caught:
        load_model(tmp_path)
    assert caught.value.code == "unknown_architecture"


def test_a_truncated_weights_file_says_to_fetch_it_again(tiny_checkpoint, tmp_path):
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=rf"{path}: .*truncated or corrupt.*quire models pull") as caught:
        load_model(tmp_path)
    assert caught.value.code == "corrupt_weights"
