"""The int8/int4 GEMM kernels a quantized linear calls, and the weight layouts they read: the CPU extension's panel
kernels (csrc/quantized_linear.cpp) on weights repacked into 16-column panels, and torch's int kernels on theirs."""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F

from .extension import extension_module

PANEL = 16  # output columns per panel of the extension's kernels


def unpack_int4(qweight: torch.Tensor) -> torch.Tensor:
    """(N, K/2) bytes, high nibble first → (N, K) levels 0..15."""
    return torch.stack([qweight >> 4, qweight & 15], dim=-1).reshape(qweight.shape[0], -1)


def panel_extension(device: torch.device) -> ModuleType | None:
    """The engine's CPU extension for a CPU weight, None elsewhere or where it is disabled or cannot build."""
    if device.type != "cpu":
        return None
    return extension_module()


def to_panels(rows: torch.Tensor) -> torch.Tensor:
    """(N, ...) → (P, ..., 16), N padded to P·16 with zeros: each panel's columns side by side, so a thread streams
    a panel's weight in one contiguous run."""
    padded = F.pad(rows, (0, 0) * (rows.dim() - 1) + (0, -rows.shape[0] % PANEL))
    return padded.reshape(-1, PANEL, *rows.shape[1:]).movedim(1, -1).contiguous()


def int4_panels(qweight: torch.Tensor) -> torch.Tensor:
    """Portable int4 (N, K/2) → the panel kernel's (P, K, 8): byte j of a panel's row k holds column j's level in its
    low nibble and column j + 8's in its high one, so one byte load feeds both halves of the panel."""
    levels = to_panels(unpack_int4(qweight))
    return levels[..., :PANEL // 2] | levels[..., PANEL // 2:] << 4


def has_kernel(op: str, device: torch.device) -> bool:
    """Whether torch's operator `op` has a kernel for this device's type."""
    key = {"cpu": "CPU", "cuda": "CUDA"}.get(device.type)
    return key is not None and torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


def int4_kernel_takes(device: torch.device, out_features: int, in_features: int) -> bool:
    """Whether torch has an int4 kernel for this device that takes a weight of this shape."""
    if device.type == "cpu":
        return has_kernel("aten::_weight_int4pack_mm_for_cpu", device) and out_features % 16 == 0
    if device.type == "cuda":
        return has_kernel("aten::_weight_int4pack_mm", device) and out_features % 8 == 0 and in_features % 32 == 0
    return False


def pack_int4(qweight: torch.Tensor, in_features: int) -> torch.Tensor:
    """The portable int4 layout → torch's int4 kernel's, which depends on the device and CPU instruction set."""
    if qweight.device.type == "cpu":
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(unpack_int4(qweight).int(), 1)
    inner_k_tiles = next(tiles for tiles in (8, 4, 2) if in_features % (tiles * 16) == 0)
    return torch.ops.aten._convert_weight_to_int4pack(qweight, inner_k_tiles)
