"""The vision tower's attention backends: every frame of a packed batch attends only within itself (block-diagonal,
non-causal). Each is built from the tower pass's layout and called once per layer with q/k/v (N, H, D).

SplitAttention (SDPA frame by frame) serves everywhere; VarlenAttention is the fused backend's Triton kernel;
KernelVisionAttention the CPU extension's bf16 flash kernel where this CPU has it.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .attention import heads_attention
from .extension import extension_module


class FrameLayout(Protocol):
    """What the backends read of a tower pass's layout (the model's VisionLayout): each frame's patch count, and
    where each frame starts in the packed batch (int32, on the model's device, one more than there are frames)."""

    lengths: list[int]
    frame_offsets: torch.Tensor


class SplitAttention:
    """SDPA frame by frame: on a CPU its flash kernel beats a block-diagonal mask over the whole batch."""

    def __init__(self, layout: FrameLayout) -> None:
        self.lengths = layout.lengths

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        parts = zip(q.split(self.lengths), k.split(self.lengths), v.split(self.lengths), strict=True)
        return torch.cat([heads_attention(qi, ki, vi) for qi, ki, vi in parts])


class VarlenAttention:
    """Every frame of a packed vision batch in one Triton call per layer: block-diagonal, non-causal."""

    def __init__(self, layout: FrameLayout) -> None:
        from .triton_attention import varlen_attention

        self.kernel = varlen_attention
        self.offsets, self.longest = layout.frame_offsets, max(layout.lengths)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.kernel(q, k, v, self.offsets, self.longest, q.shape[-1] ** -0.5)


def vision_kernel_usable(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether KernelVisionAttention serves a tower of this dtype on this device: bf16 on a CPU whose build has the
    AVX512-BF16 kernel (elsewhere SDPA serves, and fp32 keeps SDPA's exact fp32 arithmetic)."""
    if dtype != torch.bfloat16 or device.type != "cpu":
        return False
    module = extension_module()
    return module is not None and module.vision_attention_supported()


class KernelVisionAttention:
    """The vision tower's attention as one call of the compiled flash kernel over every frame: on a CPU with
    AVX512-BF16 about twice as fast as SDPA frame by frame (SplitAttention), whose bf16 path reaches only a third of
    the bf16 GEMM's rate. Takes the model's strided q/k/v views as they are."""

    def __init__(self, layout: FrameLayout) -> None:
        self.lengths = layout.lengths
        self.module = extension_module()

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.module.vision_attention(q, k, v, self.lengths, q.shape[-1] ** -0.5)
