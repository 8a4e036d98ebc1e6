"""PaddleOCR-VL configuration, parsed from a checkpoint's config.json.

Two on-disk layouts exist: the hub's flat one (text fields at the top level, remote-code era) and the
transformers-5 nested one (`text_config` / `vision_config`). Both parse to the same dataclasses so the
rest of the engine never looks at raw JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CheckpointError


@dataclass(frozen=True)
class VisionConfig:
    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_hidden_layers: int = 27
    num_attention_heads: int = 16
    num_channels: int = 3
    image_size: int = 384
    patch_size: int = 14
    layer_norm_eps: float = 1e-6
    spatial_merge_size: int = 2
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class TextConfig:
    vocab_size: int = 103424
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 18
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 128
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    mrope_section: tuple[int, int, int] = (16, 24, 24)
    pad_token_id: int = 0
    eos_token_id: int = 2


@dataclass(frozen=True)
class ModelConfig:
    text: TextConfig = field(default_factory=TextConfig)
    vision: VisionConfig = field(default_factory=VisionConfig)
    image_token_id: int = 100295
    vision_start_token_id: int = 101305
    vision_end_token_id: int = 101306

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        text_raw = dict(raw.get("text_config") or raw)
        vision_raw = dict(raw.get("vision_config") or {})
        return cls(
            text=_text_config(text_raw),
            vision=_build(VisionConfig, vision_raw, rope_theta=_rope_theta(vision_raw, 10000.0)),
            image_token_id=raw.get("image_token_id", 100295),
            vision_start_token_id=raw.get("vision_start_token_id", 101305),
            vision_end_token_id=raw.get("vision_end_token_id", 101306),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        """The config of a checkpoint directory's config.json; CheckpointError names the file and the fix when it
        is missing, unreadable or describes another model."""
        path = Path(path)
        raw = read_json(path, "config")
        _check_architecture(raw, path)
        try:
            return cls.from_dict(raw)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: not a valid PaddleOCR-VL config ({exc}). {FETCH_AGAIN}",
                                  "bad_config") from exc


FETCH_AGAIN = "Fetch the checkpoint again (`quire models pull`) or pass a complete checkpoint directory with --model."
ARCHITECTURES = frozenset({"PaddleOCRVLForConditionalGeneration"})
MODEL_TYPE = "paddleocr_vl"


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A checkpoint's JSON file as a dict; `what` names it in the error code (`no_config`, `bad_preprocessor`)."""
    if not path.is_file():
        raise CheckpointError(
            f"{path}: not found, so {path.parent} is not a complete PaddleOCR-VL checkpoint (it needs config.json, "
            f"model.safetensors, tokenizer files, preprocessor_config.json and a chat template). {FETCH_AGAIN}",
            f"no_{what}")
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not readable JSON ({exc}). {FETCH_AGAIN}", f"bad_{what}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: a JSON object expected, found {type(raw).__name__}. {FETCH_AGAIN}",
                              f"bad_{what}")
    return raw


def _check_architecture(raw: dict[str, Any], path: Path) -> None:
    """Another model's config would load into the wrong shapes or fail deep inside: refuse it by name first."""
    model_type = raw.get("model_type", MODEL_TYPE)
    architectures = set(raw.get("architectures") or ARCHITECTURES)
    if model_type != MODEL_TYPE or not architectures & ARCHITECTURES:
        named = ", ".join(sorted(architectures))
        raise CheckpointError(
            f"{path}: model_type {model_type!r} ({named}) is not PaddleOCR-VL; Quire runs PaddleOCR-VL checkpoints "
            "(v1, 1.5, 1.6, e.g. `--model PaddlePaddle/PaddleOCR-VL`).", "unknown_architecture")


def _rope_params(raw: dict[str, Any]) -> dict[str, Any]:
    return dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})


def _rope_theta(raw: dict[str, Any], default: float) -> float:
    return float(raw.get("rope_theta") or _rope_params(raw).get("rope_theta") or default)


def _text_config(raw: dict[str, Any]) -> TextConfig:
    section = _rope_params(raw).get("mrope_section", [16, 24, 24])
    eos = raw.get("eos_token_id", 2)
    config = _build(
        TextConfig,
        raw,
        rope_theta=_rope_theta(raw, 500000.0),
        mrope_section=tuple(section),
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
    )
    if sum(config.mrope_section) * 2 != config.head_dim:
        raise ValueError(f"mrope_section {config.mrope_section} must sum to head_dim/2 = {config.head_dim // 2}")
    return config


def _build(kind: type, raw: dict[str, Any], **overrides: Any) -> Any:
    names = kind.__dataclass_fields__.keys()
    values = {k: raw[k] for k in names if k in raw and raw[k] is not None}
    values.update(overrides)
    return kind(**values)
