"""Tiny random PP-DocLayoutV2/V3 checkpoints in the real on-disk format, for tests and offline demos.

The real layout weights cannot be fetched everywhere, so the `pp-doclayout` backend is proven on small seeded
models written the way the hub ships them: `save_pretrained`'s config.json and model.safetensors (the hub's
class names, per-class thresholds and reading-order class map for V2) plus a preprocessor_config.json. The
class head is scaled so that some, not all, queries clear their class threshold on any page, which gives the
post-processing real work; the input size is small so a page takes a fraction of a second on a CPU.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    PPDocLayoutV2Config,
    PPDocLayoutV2ForObjectDetection,
    PPDocLayoutV3Config,
    PPDocLayoutV3ForObjectDetection,
)

# The hub checkpoints name their 25 classes like this: the fine classes of PP-DocLayout's vocabulary with a
# few folded together (both formula kinds are "formula", header and footer images are "header" / "footer").
HUB_CLASS_NAMES = (
    "abstract", "algorithm", "aside_text", "chart", "content", "formula", "doc_title", "figure_title", "footer",
    "footer", "footnote", "formula_number", "header", "header", "image", "formula", "number", "paragraph_title",
    "reference", "reference_content", "seal", "table", "text", "text", "vision_footnote",
)
HUB_CLASS_THRESHOLDS = (
    0.5, 0.5, 0.5, 0.5, 0.5, 0.4, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.4, 0.5, 0.4, 0.5, 0.5, 0.45, 0.5,
    0.4, 0.4, 0.5,
)
HUB_CLASS_ORDER = (4, 2, 14, 1, 5, 7, 8, 6, 11, 11, 9, 13, 10, 10, 1, 2, 3, 0, 2, 2, 12, 1, 2, 15, 6)


@dataclass(frozen=True)
class TinyLayoutSpec:
    """Shape and seed of a tiny layout checkpoint."""

    version: int = 2  # PP-DocLayoutV2 or V3
    width: int = 16  # channels of the backbone, encoder and decoder
    num_queries: int = 30
    image_size: int = 128  # what the preprocessor resizes every page to (the real models use 800)
    seed: int = 0
    class_scale: float = 2.0  # spread of the class logits, so a share of queries clears the thresholds
    class_bias: float = -4.0


def write_tiny_layout_checkpoint(directory: str | Path, spec: TinyLayoutSpec | None = None) -> Path:
    """Write a complete PP-DocLayout checkpoint directory for `spec` and return its path."""
    spec = spec or TinyLayoutSpec()
    if spec.version == 2:
        model_class, config = PPDocLayoutV2ForObjectDetection, PPDocLayoutV2Config(**_v2_config(spec))
    elif spec.version == 3:
        model_class, config = PPDocLayoutV3ForObjectDetection, PPDocLayoutV3Config(**_common_config(spec, 3))
    else:
        raise ValueError(f"PP-DocLayout version {spec.version} does not exist: use 2 or 3")
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(spec.seed)
        model = model_class(config).eval()
        _keep_signal(model)
        head = model.model.decoder.class_embed
        head = head[-1] if isinstance(head, torch.nn.ModuleList) else head
        head.weight.normal_(0.0, spec.class_scale / math.sqrt(head.weight.shape[1]))
        head.bias.fill_(spec.class_bias)
    out = Path(directory)
    model.save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor(spec), indent=2))
    return out


def real_layout_config() -> PPDocLayoutV2Config:
    """PP-DocLayoutV2 at the hub checkpoint's shape, with the hub's heads (the library's defaults have none)."""
    return PPDocLayoutV2Config(num_labels=len(HUB_CLASS_THRESHOLDS), class_thresholds=list(HUB_CLASS_THRESHOLDS),
                               class_order=list(HUB_CLASS_ORDER), id2label=dict(enumerate(HUB_CLASS_NAMES)))


def write_real_shape_layout_checkpoint(directory: str | Path) -> Path:
    """A PP-DocLayoutV2 checkpoint at the real shape and input size (800) with random weights, for benchmarks
    where the real weights are not on the machine: the layout model's work per page, not its boxes."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        model = PPDocLayoutV2ForObjectDetection(real_layout_config()).eval()
        _keep_signal(model)
    out = Path(directory)
    model.save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor(TinyLayoutSpec(image_size=800)), indent=2))
    return out


def _keep_signal(model: torch.nn.Module) -> None:
    """Redraw every weight matrix and kernel with variance 2 / fan-in, and make batch norms the identity.

    The library's initialisers (std 0.01, tiny batch-norm scales) shrink activations layer after layer, so a
    random model's features vanish (~1e-13) and every query gets the same class scores and boxes.
    """
    for parameter in model.parameters():
        if parameter.dim() >= 2:
            parameter.normal_(0.0, math.sqrt(2.0 / math.prod(parameter.shape[1:])))
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.reset_parameters()


def _common_config(spec: TinyLayoutSpec, version: int) -> dict:
    width = spec.width
    stages = 3 if version == 2 else 4  # V3 also feeds the stride-4 stage to its mask head
    backbone = {
        "model_type": "hgnet_v2", "arch": "L", "return_idx": list(range(4 - stages, 4)),
        "out_features": [f"stage{i}" for i in range(5 - stages, 5)],
        "freeze_stem_only": True, "freeze_at": 0, "freeze_norm": True, "lr_mult_list": [0, 0.05, 0.05, 0.05, 0.05],
        "hidden_sizes": [width] * 4, "stem_channels": [3, width, width], "stage_in_channels": [width] * 4,
        "stage_mid_channels": [width] * 4, "stage_out_channels": [width] * 4, "stage_num_blocks": [1, 1, 1, 1],
        "stage_numb_of_layers": [2, 2, 2, 2],
    }
    config = {
        "backbone_config": backbone, "encoder_hidden_dim": width, "encoder_in_channels": [width] * 3,
        "encoder_ffn_dim": 2 * width, "encoder_attention_heads": 2, "d_model": width, "num_queries": spec.num_queries,
        "decoder_in_channels": [width] * 3, "decoder_ffn_dim": 2 * width, "decoder_layers": 1,
        "decoder_attention_heads": 2, "num_denoising": 0, "num_labels": len(HUB_CLASS_NAMES),
        "id2label": dict(enumerate(HUB_CLASS_NAMES)),
    }
    if version == 3:
        config.update(mask_feature_channels=[width, width], x4_feat_dim=width, num_prototypes=8)
    return config


def _v2_config(spec: TinyLayoutSpec) -> dict:
    reading_order = {
        "hidden_size": spec.width, "num_attention_heads": 2, "intermediate_size": 2 * spec.width,
        "num_hidden_layers": 1, "num_classes": max(HUB_CLASS_ORDER) + 1, "global_pointer_head_size": spec.width,
    }
    return {
        **_common_config(spec, 2), "reading_order_config": reading_order,
        "class_thresholds": list(HUB_CLASS_THRESHOLDS), "class_order": list(HUB_CLASS_ORDER),
    }


def _preprocessor(spec: TinyLayoutSpec) -> dict:
    return {
        "image_processor_type": f"PPDocLayoutV{spec.version}ImageProcessor",
        "do_resize": True, "size": {"height": spec.image_size, "width": spec.image_size}, "resample": 3,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0],
    }
