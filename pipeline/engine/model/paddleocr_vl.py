"""PaddleOCR-VL in plain PyTorch: NaViT vision tower, `mlp_AR` projector, ERNIE-4.5 decoder.

Module names follow the hub checkpoint (`model.*`, `visual.vision_model.*`, `mlp_AR.*`, `lm_head`) so the
loader maps tensors one to one. The decoder works on a flat (varlen) token batch and never owns its
KV cache: each attention layer hands its rotated q/k/v to an `Attention` backend passed in by the caller,
which is what lets the engine swap a contiguous cache for paged blocks without touching the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.vision_attention import SplitAttention
from .checkpoint_config import ModelConfig, TextConfig, VisionConfig
from .rope import Grid, MRope, VisionRope, apply_rope
from .vision_layout import VisionLayout

CPU_TOWER_PATCHES = 2048  # patches per vision-tower pass on a CPU (a larger image goes alone)


def patch_groups(grids: Sequence[Grid], budget: int) -> list[list[Grid]]:
    """Consecutive images in groups of at most `budget` patches; an image larger than the budget is a group alone."""
    groups: list[list[Grid]] = []
    total = budget
    for grid in grids:
        patches = grid[0] * grid[1] * grid[2]
        if total + patches > budget:
            groups.append([])
            total = 0
        groups[-1].append(grid)
        total += patches
    return groups


class VisionAttend(Protocol):
    """Attention within each frame of a packed vision batch; q/k/v (N, H, D) → (N, H, D)."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class Attention(Protocol):
    """Causal attention over a KV cache the caller owns; q (T, H, D), k/v (T, KV, D) → (T, H, D)."""

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class StackedLinear(nn.Linear):
    """Several projections of one input as one GEMM; `parts` names the checkpoint tensors it stacks, in order.

    Fewer, larger matmuls per layer (q/k/v, gate/up): on a CPU each small op costs more to launch than to run.
    The loader fills each part's rows from its own checkpoint tensor.
    """

    def __init__(self, in_features: int, parts: list[tuple[str, int]], bias: bool = False) -> None:
        super().__init__(in_features, sum(size for _, size in parts), bias=bias)
        self.parts = parts


class GeluLinear(nn.Linear):
    """A linear whose output goes through the exact (erf) GELU: one module, so a CPU engine runs both as one GEMM
    (ops/prepack.py)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(super().forward(x))


# the exact types whose forward is nn.Linear's, with the activation each applies after it: what a CPU engine prepacks
LINEARS = {nn.Linear: "none", StackedLinear: "none", GeluLinear: "gelu"}


class DecoderAttention(nn.Module):
    def __init__(self, cfg: TextConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.heads, self.kv_heads, self.head_dim = (
            layer, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        kv_width = self.kv_heads * self.head_dim
        self.qkv_proj = StackedLinear(cfg.hidden_size, [("q_proj", self.heads * self.head_dim), ("k_proj", kv_width),
                                                        ("v_proj", kv_width)])
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: Attention) -> torch.Tensor:
        t, rotated = x.shape[0], self.heads + self.kv_heads
        qkv = self.qkv_proj(x).view(t, rotated + self.kv_heads, self.head_dim)
        q, k = apply_rope(qkv[:, :rotated], cos, sin).split([self.heads, self.kv_heads], dim=1)
        return self.o_proj(attention(self.layer, q, k, qkv[:, rotated:]).reshape(t, -1))


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = StackedLinear(hidden, [("gate_proj", intermediate), ("up_proj", intermediate)])
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TextConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = DecoderAttention(cfg, layer)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: Attention) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class TextDecoder(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = MRope(cfg.head_dim, cfg.rope_theta, cfg.mrope_section)

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, attention: Attention) -> torch.Tensor:
        cos, sin = self.rope.cos_sin(positions, embeds.dtype)
        x = embeds
        for layer in self.layers:
            x = layer(x, cos, sin, attention)
        return self.norm(x)


class VisionEmbeddings(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(cfg.num_channels, cfg.hidden_size, cfg.patch_size, cfg.patch_size)
        self.side = cfg.image_size // cfg.patch_size
        self.position_embedding = nn.Embedding(self.side * self.side, cfg.hidden_size)

    def forward(self, pixel_values: torch.Tensor, layout: VisionLayout) -> torch.Tensor:
        weight = self.patch_embedding.weight
        patches = pixel_values.to(weight.dtype).flatten(1)
        x = F.linear(patches, weight.flatten(1), self.patch_embedding.bias)
        return x + self._positions(layout).to(x.dtype)

    def _positions(self, layout: VisionLayout) -> torch.Tensor:
        """Bilinear resample (half-pixel centres, clamped edges) of the 27×27 table to each image's grid."""
        table = self.position_embedding.weight
        r0, r1, rw = _taps(layout.rows, layout.heights, self.side)
        c0, c1, cw = _taps(layout.cols, layout.widths, self.side)
        idx = [a * self.side + b for a in (r0, r1) for b in (c0, c1)]
        wts = [a * b for a in (1 - rw, rw) for b in (1 - cw, cw)]
        return sum(table[i] * wt[:, None] for i, wt in zip(idx, wts, strict=True))


def _taps(index: torch.Tensor, size: torch.Tensor, side: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source taps of each patch along one axis; the scale is rounded to fp32 as a Python-float factor would be."""
    scale = (side / size.double()).float()
    src = ((index.float() + 0.5) * scale - 0.5).clamp(min=0)
    lo = src.floor().long().clamp(max=side - 1)
    hi = (lo + 1).clamp(max=side - 1)
    return lo, hi, src - lo


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.qkv_proj = StackedLinear(d, [("q_proj", d), ("k_proj", d), ("v_proj", d)], bias=True)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: VisionAttend) -> torch.Tensor:
        """One GEMM for q, k and v, and one rotation for q and k together (rotated in fp32, as the reference)."""
        n = x.shape[0]
        qkv = self.qkv_proj(x).view(n, 3 * self.heads, self.head_dim)
        q, k = apply_rope(qkv[:, :2 * self.heads].float(), cos, sin).to(x.dtype).split(self.heads, dim=1)
        return self.out_proj(attend(q, k, qkv[:, 2 * self.heads:]).reshape(n, -1))


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class VisionLayer(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.self_attn = VisionAttention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = VisionMLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: VisionAttend) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), cos, sin, attend)
        return x + self.mlp(self.layer_norm2(x))


class VisionEncoder(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VisionLayer(cfg) for _ in range(cfg.num_hidden_layers))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.embeddings = VisionEmbeddings(cfg)
        self.encoder = VisionEncoder(cfg)
        self.post_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.rope = VisionRope(cfg.head_dim, cfg.rope_theta)

    def forward(self, pixel_values: torch.Tensor, layout: VisionLayout, attend: VisionAttend) -> torch.Tensor:
        """Packed NaViT pass: every image's patches in one sequence, attention block-diagonal per frame."""
        x = self.embeddings(pixel_values, layout)
        cos, sin = self.rope.cos_sin(layout.rows, layout.cols)
        for layer in self.encoder.layers:
            x = layer(x, cos, sin, attend)
        return self.post_layernorm(x)


class VisionModel(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.vision_model = VisionTransformer(cfg)


class Projector(nn.Module):
    """mlp_AR: LayerNorm per patch, 2×2 merge in raster order of windows, erf-GELU MLP to text width."""

    def __init__(self, vision: VisionConfig, text_hidden: int) -> None:
        super().__init__()
        self.merged_width = merged = vision.hidden_size * vision.spatial_merge_size ** 2
        self.pre_norm = nn.LayerNorm(vision.hidden_size, eps=1e-5)
        self.linear_1 = GeluLinear(merged, merged)
        self.linear_2 = nn.Linear(merged, text_hidden)

    def forward(self, features: torch.Tensor, layout: VisionLayout) -> torch.Tensor:
        merged = self.pre_norm(features)[layout.merge_order].reshape(-1, self.merged_width)
        return self.linear_2(self.linear_1(merged))


class PaddleOCRVL(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = TextDecoder(config.text)
        self.lm_head = nn.Linear(config.text.hidden_size, config.text.vocab_size, bias=False)
        self.visual = VisionModel(config.vision)
        self.mlp_AR = Projector(config.vision, config.text.hidden_size)

    @property
    def dtype(self) -> torch.dtype:
        """The model dtype, read off the embedding: the one weight never quantized nor prepacked."""
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def encode_images(self, pixel_values: torch.Tensor, grids: Sequence[Grid],
                      attend: Callable[[VisionLayout], VisionAttend] = SplitAttention) -> torch.Tensor:
        """Vision tower + projector for several images → (Σ merged tokens, text hidden).

        `attend` makes the tower's attention from the batch's layout (its frames' lengths and offsets): SDPA per
        frame by default, one varlen kernel call over all frames on CUDA. A GPU takes all images in one pass; a CPU
        takes them in groups of at most CPU_TOWER_PATCHES patches, because there the tower's elementwise passes
        (rope, residuals, GELU) are bound by memory and ran 35 % slower on a whole batch's activations than on one
        image's, which stay nearer the caches.
        """
        if self.device.type != "cpu":
            return self._encode(pixel_values, grids, attend)
        groups = patch_groups(grids, CPU_TOWER_PATCHES)
        sizes = [sum(t * h * w for t, h, w in group) for group in groups]
        return torch.cat([self._encode(pixels, group, attend)
                          for pixels, group in zip(pixel_values.split(sizes), groups, strict=True)])

    def _encode(self, pixel_values: torch.Tensor, grids: Sequence[Grid],
                attend: Callable[[VisionLayout], VisionAttend]) -> torch.Tensor:
        """One tower pass over these images; pixels from the host travel as the tower's dtype, pinned, without
        blocking the host."""
        layout = VisionLayout(grids, self.config.vision.spatial_merge_size, self.device)
        pixels = pixel_values.to(self.visual.vision_model.embeddings.patch_embedding.weight.dtype)
        if pixels.device != self.device:
            pixels = pixels.pin_memory().to(self.device, non_blocking=True)
        features = self.visual.vision_model(pixels, layout, attend(layout))
        return self.mlp_AR(features, layout).to(self.dtype)

    def embed(self, input_ids: torch.Tensor, image_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings with placeholder rows overwritten, in order, by `image_embeds`.

        The caller guarantees one embedding row per placeholder (counting them here would sync with the device).
        """
        embeds = self.model.embed_tokens(input_ids)
        if image_embeds is None:
            return embeds
        mask = input_ids == self.config.image_token_id
        return embeds.masked_scatter(mask[:, None], image_embeds.to(embeds.dtype))

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, attention: Attention) -> torch.Tensor:
        """Final hidden states (T, hidden) of a flat token batch."""
        return self.model(embeds, positions, attention)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()
