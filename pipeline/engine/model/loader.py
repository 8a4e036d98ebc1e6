"""Checkpoint loading: a local directory or a hub id, single or sharded safetensors, two key layouts.

The model is built on the meta device and each tensor is read, cast and placed on the target device one
at a time, so loading never holds a second full copy of the weights. Quantizing at load works the same way: each
decoder or head weight is quantized as it is read, so memory peaks near the quantized size plus one float tensor.
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

from .checkpoint_config import FETCH_AGAIN, ModelConfig, read_json
from .errors import CheckpointError
from .paddleocr_vl import PaddleOCRVL
from .quantization import Quantization, QuantizedLinear, install, is_quantized_module

CHECKPOINT_FILES = ["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model"]
_IGNORED = re.compile(r"packing_position_embedding|vision_model\.head\.")
EMBEDDING, HEAD = "model.embed_tokens.weight", "lm_head.weight"
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
    path = named_directory(path_or_id)
    if path is not None:
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path_or_id), allow_patterns=CHECKPOINT_FILES))
    except Exception as exc:  # offline, unknown repo, gated: all mean "not available here"
        raise CheckpointError(
            f"{path_or_id}: not a local directory and could not be fetched from the hub ({exc}). {HOW_TO_GET_WEIGHTS}",
            "model_unavailable") from exc


def named_directory(path_or_id: str | Path) -> Path | None:
    """The directory `path_or_id` names, or None for a hub id; CheckpointError when it is written as a path (or one
    exists there) but no directory is there: a typo the caller should hear of before any work, not a model to fetch."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    if path.exists() or str(path_or_id).startswith((".", "/", "~")):
        raise CheckpointError(f"{path_or_id}: not a checkpoint directory. {HOW_TO_GET_WEIGHTS}", "model_unavailable")
    return None


def local_checkpoint(model: str | Path) -> Path | None:
    """`model`'s checkpoint directory if it is on this machine (a directory, or the Hugging Face cache), else None;
    never downloads."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path if (path / "config.json").is_file() else None
    from huggingface_hub import snapshot_download

    try:
        cached = Path(snapshot_download(str(model), local_files_only=True))
    except Exception:  # not cached, or not a repo id: either way not here
        return None
    return cached if (cached / "config.json").is_file() and any(cached.glob("*.safetensors")) else None


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
    path_or_id: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
    quantization: str = "none", group_size: int | None = None,
) -> PaddleOCRVL:
    """The model of a checkpoint, its decoder linears and head quantized when asked or when stored so.

    `quantization` "int8" or "int4" (with `group_size`, default 64) quantizes a float checkpoint as it loads. A
    checkpoint written by `quire models quantize` loads in its own scheme, as vLLM and llama.cpp load a checkpoint's
    own quantization: "none" takes it as stored, and asking for another scheme is a CheckpointError, since the float
    weights it would need are gone.
    """
    directory = resolve_checkpoint(path_or_id)
    config = ModelConfig.from_file(directory / "config.json")
    scheme = _load_scheme(directory, quantization, group_size)
    model = empty_model(config)
    targets, files = checked_tensor_names(model, directory)
    quantized = install(model, scheme, dtype, torch.device(device)) if scheme else {}
    head_from_embedding = not any(name.startswith("lm_head.") for name in files)
    for name, key, file, tensor in _tensors(files):
        check_shape(key, file, tensor.shape, targets[name].shape)
        _place(model, quantized, targets[name], tensor, device, dtype)
        if name == EMBEDDING and head_from_embedding and HEAD in quantized:
            _place(model, quantized, targets[HEAD], tensor, device, dtype)
    if head_from_embedding and HEAD not in quantized:
        model.lm_head.weight = model.model.embed_tokens.weight
    for module in quantized.values():
        module.finish()
    return model.eval()


def empty_model(config: ModelConfig) -> PaddleOCRVL:
    """The model's modules on the meta device, their initialisers skipped: meta tensors have no values to set, and
    torch runs an initialiser on meta through its reference ops, which import torch._dynamo (a second and a half of
    start-up here, and hundreds of modules) for nothing."""
    saved = {name: getattr(nn.init, name) for name in _INITIALISERS}
    for name in _INITIALISERS:
        setattr(nn.init, name, _leave)
    try:
        with torch.device("meta"):
            return PaddleOCRVL(config)
    finally:
        for name, initialiser in saved.items():
            setattr(nn.init, name, initialiser)


_INITIALISERS = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_", "zeros_", "ones_",
                 "constant_")


def _leave(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return tensor


def stored_quantization(directory: Path) -> Quantization | None:
    """The scheme a checkpoint was quantized with, from config.json's `quantization_config`; None for float."""
    marker = read_json(directory / "config.json", "config").get("quantization_config")
    if marker is None:
        return None
    if not isinstance(marker, dict) or marker.get("quant_method") != "quire":
        raise CheckpointError(f"{directory / 'config.json'}: quantization_config {marker} is not one Quire wrote "
                              "(`quire models quantize`); load the float checkpoint instead",
                              "unsupported_quantization")
    try:
        return Quantization.from_marker(marker)
    except ValueError as exc:
        raise CheckpointError(f"{directory / 'config.json'}: {exc}", "unsupported_quantization") from exc


def _load_scheme(directory: Path, quantization: str, group_size: int | None) -> Quantization | None:
    requested = Quantization.parse(quantization, group_size)
    stored = stored_quantization(directory)
    if stored is None or requested is None:
        return stored or requested
    if requested.method == stored.method and group_size in (None, stored.group_size):
        return stored
    raise CheckpointError(
        f"{directory} is quantized {stored} and cannot be loaded as {requested}: ask for quantization "
        f"'{stored.method}' or 'none' (the checkpoint's own), or quantize the float checkpoint again",
        "quantization_mismatch")


def _place(model: nn.Module, quantized: dict[str, QuantizedLinear], target: Target, tensor: torch.Tensor,
           device: str | torch.device, dtype: torch.dtype) -> None:
    module = quantized.get(target.parameter)
    if module is None:  # a copy even in the file's dtype: a view would keep the file mapped (~1.5 GB of RSS)
        _assign(model, target, tensor.to(device=device, dtype=dtype, copy=True))
        return
    stored = {target.component: tensor} if target.component else module.scheme.quantize(tensor)
    for name, part in stored.items():
        module.fill(name, part, target.rows)


def quantized_tensors(directory: Path, scheme: Quantization) -> Iterator[tuple[str, torch.Tensor]]:
    """A float checkpoint's tensors under their hub names, the decoder's and head's weights replaced by their
    quantized tensors (the head's from the embedding when it is tied): what `quire models quantize` writes."""
    if stored_quantization(directory) is not None:
        raise CheckpointError(f"{directory} is already quantized: quantize the float checkpoint", "already_quantized")
    model = empty_model(ModelConfig.from_file(directory / "config.json"))
    targets, files = checked_tensor_names(model, directory)
    for name, target in targets.items():  # before reading any data
        if _quantizes(target):
            scheme.check_width(name.removesuffix(".weight"), target.shape[1])
    for name, key, file, tensor in _tensors(files):
        check_shape(key, file, tensor.shape, targets[name].shape)
        for output in [name, HEAD] if name == EMBEDDING and HEAD not in files else [name]:
            if not _quantizes(targets[output]):
                yield output, tensor
                continue
            base = output.removesuffix(".weight")
            yield from ((f"{base}.{suffix}", part) for suffix, part in scheme.quantize(tensor).items())


def checked_tensor_names(
    model: nn.Module, directory: Path
) -> tuple[dict[str, Target], dict[str, tuple[str, Path]]]:
    """(the model's targets, the checkpoint's tensors by hub name → (key, file)), refused when a tensor the model
    needs is missing or one it has no place for is there: the checks `quire models pull` runs without weights."""
    targets = checkpoint_targets(model)
    stored = stored_quantization(directory)
    if stored is not None:
        targets = _stored_targets(targets, stored)
    files = {hub_key(k): (k, f) for k, f in weight_files(directory).items() if not _IGNORED.search(k)}
    _check_keys({name: target.shape for name, target in targets.items()}, files, directory)
    return targets, files


def check_shape(key: str, file: Path, shape: torch.Size, expected: torch.Size) -> None:
    if shape != expected:
        raise CheckpointError(f"{file.name}: tensor {key} has shape {tuple(shape)}, expected {tuple(expected)}")


def _check_keys(expected: dict[str, torch.Size], files: dict[str, tuple[str, Path]], directory: Path) -> None:
    missing = sorted(set(expected) - set(files) - {HEAD})
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
    """Where one checkpoint tensor goes: a model parameter, or a row range of a stacked one; for a quantized
    checkpoint, which stored tensor (`qweight`, `scales`, `zeros`) of the parameter's quantized weight."""

    parameter: str
    shape: torch.Size
    rows: slice | None = None
    component: str | None = None


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


def _quantizes(target: Target) -> bool:
    module, _, attr = target.parameter.rpartition(".")
    return attr == "weight" and is_quantized_module(module)


def _stored_targets(targets: dict[str, Target], scheme: Quantization) -> dict[str, Target]:
    """A quantized checkpoint's names: each quantized weight `X.weight` stored as `X.qweight`, `X.scales`, ..."""
    stored = {}
    for name, target in targets.items():
        if not _quantizes(target):
            stored[name] = target
            continue
        base = name.removesuffix(".weight")
        for suffix, shape in scheme.shapes(*target.shape).items():
            stored[f"{base}.{suffix}"] = Target(target.parameter, shape, target.rows, suffix)
    return stored
