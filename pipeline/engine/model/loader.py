"""Checkpoint loading: a local directory or a hub id, single or sharded safetensors, two key layouts.

The model is built on the meta device and each tensor is read, cast and placed on the target device one
at a time, so loading never holds a second full copy of the weights.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from ..errors import CheckpointError
from .config import FETCH_AGAIN, ModelConfig
from .paddleocr_vl import PaddleOCRVL

CHECKPOINT_FILES = ["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model"]
_IGNORED = re.compile(r"packing_position_embedding|vision_model\.head\.")
_RENAMES = [
    (re.compile(r"^model\.language_model\."), "model."),
    (re.compile(r"^model\.visual\."), "visual."),
    (re.compile(r"^model\.projector\."), "mlp_AR."),
]


HOW_TO_GET_WEIGHTS = (
    "Fetch the model with `quire models pull` (on a connected machine; `--dir DIR` to place it, then pass DIR), "
    "or run `quire demo` for the tiny random checkpoint."
)


def resolve_checkpoint(path_or_id: str | Path) -> Path:
    """A local directory as is; otherwise a hub id fetched (or found in the cache) via huggingface_hub."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    if path.exists() or str(path_or_id).startswith((".", "/", "~")):
        raise CheckpointError(f"{path_or_id}: not a checkpoint directory. {HOW_TO_GET_WEIGHTS}", "model_unavailable")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path_or_id), allow_patterns=CHECKPOINT_FILES))
    except Exception as exc:  # offline, unknown repo, gated: all mean "not available here"
        raise CheckpointError(
            f"{path_or_id}: not a local directory and could not be fetched from the hub ({exc}). {HOW_TO_GET_WEIGHTS}",
            "model_unavailable") from exc


def hub_key(key: str) -> str:
    """Map a transformers-5 tensor name to the hub name the model's modules use."""
    for pattern, replacement in _RENAMES:
        if pattern.search(key):
            return pattern.sub(replacement, key, count=1)
    return key


def weight_files(directory: Path) -> dict[str, Path]:
    """tensor key → file, from the shard index when there is one."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {key: directory / name for key, name in weight_map.items()}
    single = directory / "model.safetensors"
    if not single.exists():
        raise CheckpointError(f"{directory}: no model.safetensors or model.safetensors.index.json. {FETCH_AGAIN}",
                              "no_weights")
    try:
        with safe_open(single, framework="pt") as f:
            return {key: single for key in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{single}: unreadable safetensors file, truncated or corrupt ({exc}). {FETCH_AGAIN}",
                              "corrupt_weights") from exc


def load_model(
    path_or_id: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> PaddleOCRVL:
    directory = resolve_checkpoint(path_or_id)
    config = ModelConfig.from_file(directory / "config.json")
    with torch.device("meta"):
        model = PaddleOCRVL(config)
    targets, files = checked_tensor_names(model, directory)
    for name, key, file, tensor in _tensors(files):
        check_shape(key, file, tensor.shape, targets[name].shape)
        _assign(model, targets[name], tensor.to(device=device, dtype=dtype))
    if "lm_head.weight" not in files:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def checked_tensor_names(
    model: nn.Module, directory: Path
) -> tuple[dict[str, Target], dict[str, tuple[str, Path]]]:
    """(the model's targets, the checkpoint's tensors by hub name → (key, file)), refused when a tensor the model
    needs is missing or one it has no place for is there: the checks `quire models pull` runs without weights."""
    targets = checkpoint_targets(model)
    files = {hub_key(k): (k, f) for k, f in weight_files(directory).items() if not _IGNORED.search(k)}
    _check_keys({name: target.shape for name, target in targets.items()}, files, directory)
    return targets, files


def check_shape(key: str, file: Path, shape: torch.Size, expected: torch.Size) -> None:
    if shape != expected:
        raise CheckpointError(f"{file.name}: tensor {key} has shape {tuple(shape)}, expected {tuple(expected)}")


def _check_keys(expected: dict[str, torch.Size], files: dict[str, tuple[str, Path]], directory: Path) -> None:
    missing = sorted(set(expected) - set(files) - {"lm_head.weight"})
    if missing:
        raise CheckpointError(f"{directory}: missing tensor {missing[0]}" + _more(missing))
    unexpected = sorted(set(files) - set(expected))
    if unexpected:
        key, file = files[unexpected[0]]
        raise CheckpointError(f"{file.name}: unexpected tensor {key}" + _more(unexpected))


def _more(keys: list[str]) -> str:
    return f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""


def _tensors(files: dict[str, tuple[str, Path]]) -> Iterator[tuple[str, str, Path, torch.Tensor]]:
    """Yield each tensor once, opening every shard once."""
    by_file: dict[Path, list[tuple[str, str]]] = {}
    for name, (key, file) in files.items():
        by_file.setdefault(file, []).append((name, key))
    for file, entries in by_file.items():
        key = "?"
        try:
            with safe_open(file, framework="pt") as f:
                for name, key in entries:
                    yield name, key, file, f.get_tensor(key)
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{file}: cannot read tensor {key}, the file is truncated or corrupt ({exc}). "
                                  f"{FETCH_AGAIN}", "corrupt_weights") from exc


@dataclass(frozen=True)
class Target:
    """Where one checkpoint tensor goes: a model parameter, or a row range of a stacked one."""

    parameter: str
    shape: torch.Size
    rows: slice | None = None


def checkpoint_targets(model: nn.Module) -> dict[str, Target]:
    """Checkpoint tensor name → target; a StackedLinear's parameter is filled from one tensor per part."""
    targets = {}
    for name, param in model.named_parameters():
        module_path, _, attr = name.rpartition(".")
        parts = getattr(model.get_submodule(module_path), "parts", None)
        if parts is None:
            targets[name] = Target(name, param.shape)
            continue
        owner, start = module_path.rpartition(".")[0], 0
        for part, size in parts:
            targets[f"{owner}.{part}.{attr}"] = Target(name, torch.Size((size, *param.shape[1:])),
                                                       slice(start, start + size))
            start += size
    return targets


def _assign(model: nn.Module, target: Target, tensor: torch.Tensor) -> None:
    module_path, _, attr = target.parameter.rpartition(".")
    module = model.get_submodule(module_path)
    if target.rows is None:
        module._parameters[attr] = nn.Parameter(tensor, requires_grad=False)
        return
    current = module._parameters[attr]
    if current.is_meta:
        current = nn.Parameter(torch.empty(current.shape, dtype=tensor.dtype, device=tensor.device),
                               requires_grad=False)
        module._parameters[attr] = current
    current.data[target.rows] = tensor
