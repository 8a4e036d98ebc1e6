"""Tiny random PaddleOCR-VL checkpoints in the real on-disk format, for tests, benchmarks and the demo.

The real weights cannot be fetched everywhere, so correctness is proven on small random models written
exactly as the hub ships them: flat config.json, hub (or transformers-5) tensor names, the unused tensor
groups, a tokenizer whose special tokens sit at the real ids, the real preprocessor values and the
checkpoint's own chat template. Parameters are seeded; norm weights sit around 1 and the head can be
made "peaky" so greedy margins are wide and a token flip means a bug, not a near-tie.
"""

from __future__ import annotations

import json
import math
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipeline.engine.model.checkpoint_config import ModelConfig, TextConfig, VisionConfig
from pipeline.engine.model.loader import checkpoint_targets
from pipeline.engine.model.paddleocr_vl import PaddleOCRVL
from pipeline.samples.tiny_versions import write_version_files

SPECIAL_IDS = {
    "<unk>": 0, "<s>": 1, "</s>": 2,
    "<|end_of_sentence|>": 100272, "<|begin_of_sentence|>": 100273, "<mask:1>": 100274,
    "<|IMAGE_PLACEHOLDER|>": 100295, "<|IMAGE_START|>": 101305, "<|IMAGE_END|>": 101306,
    "<|video_pad|>": 101307,
}
OTSL_TAGS = ["<fcel>", "<ecel>", "<lcel>", "<ucel>", "<xcel>", "<nl>"]
SPOTTING_TAGS = ["<|TEXT_START|>", "<|TEXT_END|>", "<|LOC_BEGIN|>", "<|LOC_END|>"] + [
    f"<|LOC_{i}|>" for i in range(1001)]
_OTSL_FIRST_ID, _SPOTTING_FIRST_ID = 101000, 101310

_CORPUS = (
    "OCR: Table Recognition: Formula Recognition: Chart Recognition: Spotting: Seal Recognition: "
    "User: Assistant: The quick brown fox jumps over the lazy dog. Invoice number 12345 dated 2026-12-02. "
    "Total amount due: $1,234.56. Page 1 of 4. Introduction Methods Results Discussion References "
    "\\frac{a}{b} + \\sqrt{x^2} = \\alpha \\beta \\sum_{i=1}^{n} x_i "
) * 4


@dataclass(frozen=True)
class TinySpec:
    """Shape and seed of a tiny checkpoint; `bench()` and `real_shapes()` are the other presets."""

    text_hidden: int = 64
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 2
    text_head_dim: int = 16
    text_intermediate: int = 128
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 4
    vision_intermediate: int = 128
    vocab_size: int = 103424
    seed: int = 0
    tied: bool = False
    layout: str = "hub"
    head_scale: float = 4.0
    version: str = "1.0"  # which version's files (tiny_versions.VERSIONS): config layout, pixel limits, template
    dtype: str = "float32"  # on disk; the hub ships bf16
    min_pixels: int | None = None  # the preprocessor's floor, else the version's: a lower one keeps test crops small

    @classmethod
    def bench(cls) -> TinySpec:
        """head_dim 128 (what vLLM's CPU attention accepts), small enough for CPU benchmarks."""
        return cls(text_hidden=256, text_layers=4, text_heads=4, text_kv_heads=2, text_head_dim=128,
                   text_intermediate=512, vision_hidden=128, vision_layers=2, vision_heads=4,
                   vision_intermediate=256)

    @classmethod
    def real_shapes(cls) -> TinySpec:
        """The real 0.9B model's shapes (config defaults), bf16 on disk as the hub ships it: ~1.9 GB."""
        text, vision = TextConfig(), VisionConfig()
        return cls(text_hidden=text.hidden_size, text_layers=text.num_hidden_layers,
                   text_heads=text.num_attention_heads, text_kv_heads=text.num_key_value_heads,
                   text_head_dim=text.head_dim, text_intermediate=text.intermediate_size,
                   vision_hidden=vision.hidden_size, vision_layers=vision.num_hidden_layers,
                   vision_heads=vision.num_attention_heads, vision_intermediate=vision.intermediate_size,
                   dtype="bfloat16")

    def model_config(self) -> ModelConfig:
        half = self.text_head_dim // 2
        section = (half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8)
        return ModelConfig(
            text=TextConfig(
                vocab_size=self.vocab_size, hidden_size=self.text_hidden, intermediate_size=self.text_intermediate,
                num_hidden_layers=self.text_layers, num_attention_heads=self.text_heads,
                num_key_value_heads=self.text_kv_heads, head_dim=self.text_head_dim, mrope_section=section),
            vision=VisionConfig(
                hidden_size=self.vision_hidden, intermediate_size=self.vision_intermediate,
                num_hidden_layers=self.vision_layers, num_attention_heads=self.vision_heads),
        )


def write_tiny_checkpoint(directory: str | Path, spec: TinySpec | None = None) -> Path:
    """Write a complete checkpoint directory for `spec` and return its path."""
    spec = spec or TinySpec()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config = spec.model_config()
    write_version_files(out, config, spec.version, spec.tied, spec.min_pixels)
    tensors = _random_tensors(config, spec)
    if spec.layout == "transformers":
        tensors = {_transformers_key(k): v for k, v in tensors.items()}
    elif spec.layout != "hub":
        raise ValueError(f"unknown layout {spec.layout!r}: use 'hub' or 'transformers'")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_tokenizer(out, spec.vocab_size)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "pad_token_id": 0, "use_cache": False}))
    return out


def _random_tensors(config: ModelConfig, spec: TinySpec) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(spec.seed)
    with torch.device("meta"):
        shapes = {name: target.shape for name, target in checkpoint_targets(PaddleOCRVL(config)).items()}
    if spec.tied:
        shapes.pop("lm_head.weight")
    tensors = {name: _init(name, shape, gen, spec) for name, shape in shapes.items()}
    hidden = config.vision.hidden_size
    tensors["visual.vision_model.embeddings.packing_position_embedding.weight"] = torch.randn(
        32768, hidden, generator=gen)
    tensors["visual.vision_model.head.probe"] = torch.randn(1, 1, hidden, generator=gen)
    tensors["visual.vision_model.head.attention.in_proj_weight"] = torch.randn(3 * hidden, hidden, generator=gen)
    return {name: tensor.to(getattr(torch, spec.dtype)) for name, tensor in tensors.items()}


def _init(name: str, shape: torch.Size, gen: torch.Generator, spec: TinySpec) -> torch.Tensor:
    noise = torch.randn(shape, generator=gen)
    if "norm" in name and name.endswith("weight"):
        return 1.0 + 0.1 * noise
    if name.endswith("bias"):
        return 0.05 * noise
    if name == "lm_head.weight":
        return noise * spec.head_scale / math.sqrt(shape[1])
    if "embed_tokens" in name or "position_embedding" in name:
        return noise * 0.5
    fan_in = math.prod(shape[1:])
    return noise / math.sqrt(fan_in)


_TRANSFORMERS_PREFIXES = (
    ("visual.", "model.visual."), ("mlp_AR.", "model.projector."), ("model.", "model.language_model."))


def _transformers_key(key: str) -> str:
    for old, new in _TRANSFORMERS_PREFIXES:
        if key.startswith(old):
            return new + key[len(old):]
    return key


def _write_tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    seed_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    seed_tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens],
        initial_alphabet=list(string.printable.strip()) + ["▁"], show_progress=False)
    seed_tok.train_from_iterator([_CORPUS], trainer)
    trained = json.loads(seed_tok.to_str())["model"]
    vocab = _full_vocab(trained["vocab"], vocab_size)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) for m in trained["merges"]],
                               unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_IDS])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPOTTING_TAGS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in OTSL_TAGS])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>",
        "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>", "mask_token": "<mask:1>",
        "add_bos_token": False, "add_eos_token": False, "model_max_length": 131072,
        "extra_special_tokens": {"image_token": "<|IMAGE_PLACEHOLDER|>"},
        "processor_class": "PaddleOCRVLProcessor",
    }, indent=2))


def _full_vocab(trained: dict[str, int], vocab_size: int) -> dict[str, int]:
    """Trained pieces keep their low ids; special and tag tokens sit at fixed ids; the rest is reserved."""
    fixed = dict(SPECIAL_IDS)
    fixed.update({t: _OTSL_FIRST_ID + i for i, t in enumerate(OTSL_TAGS)})
    fixed.update({t: _SPOTTING_FIRST_ID + i for i, t in enumerate(SPOTTING_TAGS)})
    by_id = {i: f"<|reserved_{i}|>" for i in range(vocab_size)}
    by_id.update({i: t for t, i in trained.items()})
    by_id.update({i: t for t, i in fixed.items()})
    return {t: i for i, t in by_id.items()}
