"""Weight-only int8 and int4 quantization of the text decoder's linears and the head.

Decoding reads every decoder and head weight once per token, so where a step is bound by memory traffic, fewer
weight bytes make it faster; the vision tower, the projector and the embedding run once per image or are looked up,
not multiplied, so they keep the model dtype. int8 is symmetric per output channel; int4 is asymmetric per group of
`group_size` input columns, `w ≈ (q - 8) · scale + zero` as torch's int4 kernels define it. Scales and zeros are
bf16 because those kernels take them in the activation dtype, and on a CPU their fp32-activation paths are scalar
(about ten times slower), so activations are cast to bf16 for the kernels. Where the engine's CPU extension builds,
its own kernels serve instead: on fp32 activations, from weights repacked into 16-column panels, they are faster than
both torch's int kernels and the fp32 GEMM at decode sizes. Every step is row-local, so a stacked
projection quantized part by part equals the stack quantized whole, and quantizing always runs on the CPU in fp32,
so `quire models quantize` and quantizing at load give the same bits.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.int_linear import (
    has_kernel,
    int4_kernel_takes,
    int4_panels,
    pack_int4,
    panel_extension,
    to_panels,
    unpack_int4,
)

QUANTIZATIONS = ("none", "int8", "int4")
GROUP_SIZES = (32, 64, 128)
DEFAULT_GROUP_SIZE = 64
KERNEL_DTYPE = torch.bfloat16
QUANTIZED_MODULES = re.compile(r"^(lm_head|model\.layers\.\d+\.(self_attn|mlp)\.\w+)$")
_REFITS = 4  # least-squares refits of each int4 group's scale and zero: 5-6% less error than min/max alone
_CHUNK_ROWS = 4096  # quantize in row chunks, so the temporaries stay a few MB for the 103k-row head


@dataclass(frozen=True)
class Quantization:
    """A quantization scheme: `int8`, or `int4` with its group size."""

    method: str
    group_size: int | None = None

    @classmethod
    def parse(cls, method: str, group_size: int | None = None) -> Quantization | None:
        """The scheme `method` names (None for `none`); ValueError for an unknown name or group size."""
        if method not in QUANTIZATIONS:
            raise ValueError(f"unknown quantization {method!r}: use one of {', '.join(QUANTIZATIONS)}")
        if method != "int4":
            if group_size is not None:
                raise ValueError(f"a group size applies to int4 only, not to {method!r}")
            return None if method == "none" else cls(method)
        size = DEFAULT_GROUP_SIZE if group_size is None else group_size
        if size not in GROUP_SIZES:
            raise ValueError(f"unsupported int4 group size {size}: use one of {', '.join(map(str, GROUP_SIZES))}")
        return cls(method, size)

    @classmethod
    def from_marker(cls, marker: dict[str, Any]) -> Quantization:
        scheme = cls.parse(marker.get("quantization", ""), marker.get("group_size"))
        if scheme is None:
            raise ValueError(f"quantization_config {marker} names no quantization")
        return scheme

    def marker(self) -> dict[str, Any]:
        """What a quantized checkpoint's config.json records under `quantization_config`."""
        extra = {} if self.group_size is None else {"group_size": self.group_size}
        return {"quant_method": "quire", "quantization": self.method, **extra}

    def __str__(self) -> str:
        return self.method if self.group_size is None else f"{self.method} (group size {self.group_size})"

    def check_width(self, layer: str, in_features: int) -> None:
        if self.group_size is not None and in_features % self.group_size:
            valid = [size for size in GROUP_SIZES if in_features % size == 0]
            raise ValueError(f"{layer}: input width {in_features} is not a multiple of the int4 group size "
                             f"{self.group_size}; valid group sizes for it: {', '.join(map(str, valid)) or 'none'}")

    def shapes(self, rows: int, in_features: int) -> dict[str, torch.Size]:
        """The stored tensors of a weight of `rows` × `in_features`, by suffix."""
        if self.group_size is None:
            return {"qweight": torch.Size((rows, in_features)), "scales": torch.Size((rows,))}
        groups = torch.Size((rows, in_features // self.group_size))
        return {"qweight": torch.Size((rows, in_features // 2)), "scales": groups, "zeros": groups}

    def quantize(self, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """The stored tensors of a float weight (N, K), on the CPU."""
        chunks = [self._quantize_rows(rows) for rows in weight.detach().cpu().float().split(_CHUNK_ROWS)]
        return {name: torch.cat([chunk[name] for chunk in chunks]) for name in chunks[0]}

    def _quantize_rows(self, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.group_size is None:
            return quantize_int8(weight)
        return quantize_int4(weight, self.group_size)

    def module(self, linear: nn.Linear, dtype: torch.dtype, device: torch.device) -> QuantizedLinear:
        """An empty quantized stand-in for `linear`, its stored tensors to be filled by `QuantizedLinear.fill`."""
        if linear.bias is not None:
            raise ValueError("only bias-free linears are quantized")
        kind = Int8Linear if self.group_size is None else Int4Linear
        return kind(self, linear.in_features, linear.out_features, dtype, device)


def quantize_int8(weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """Symmetric per output channel; the int8 values are rounded against the bf16 scale the kernel will use."""
    scales = (weight.abs().amax(dim=1) / 127).to(KERNEL_DTYPE).clamp(min=torch.finfo(KERNEL_DTYPE).tiny)
    qweight = torch.round(weight / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return {"qweight": qweight, "scales": scales}


def quantize_int4(weight: torch.Tensor, group_size: int) -> dict[str, torch.Tensor]:
    """Asymmetric per group: min/max, then least-squares refits of scale and offset to the rounded values."""
    groups = weight.reshape(weight.shape[0], -1, group_size)
    low = groups.amin(dim=-1, keepdim=True)
    scale = ((groups.amax(dim=-1, keepdim=True) - low) / 15).clamp(min=torch.finfo(KERNEL_DTYPE).tiny)
    for _ in range(_REFITS):
        scale, low = _refit(groups, _levels(groups, scale, low), scale, low)
    scales = scale.to(KERNEL_DTYPE)
    zeros = (low + 8 * scale).to(KERNEL_DTYPE)
    levels = _levels(groups, scales.float(), zeros.float() - 8 * scales.float()).to(torch.uint8)
    pairs = levels.reshape(weight.shape[0], -1, 2)
    return {"qweight": pairs[..., 0] << 4 | pairs[..., 1], "scales": scales.squeeze(-1), "zeros": zeros.squeeze(-1)}


def _levels(groups: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    return torch.round((groups - low) / scale).clamp(0, 15)


def _refit(groups: torch.Tensor, levels: torch.Tensor, scale: torch.Tensor,
           low: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scale and offset that best fit the group to its levels; a group on one level keeps its own."""
    level_mean, value_mean = levels.mean(-1, keepdim=True), groups.mean(-1, keepdim=True)
    centred = levels - level_mean
    spread = centred.square().sum(-1, keepdim=True)
    fitted = (centred * (groups - value_mean)).sum(-1, keepdim=True) / spread.clamp(min=1)
    new_scale = torch.where((spread > 0) & (fitted > 0), fitted, scale)
    return new_scale, torch.where(spread > 0, value_mean - new_scale * level_mean, low)


class QuantizedLinear(nn.Module, ABC):
    """A bias-free linear holding its weight as integers plus bf16 scales; it returns the model dtype.

    The loader fills the stored tensors row range by row range (`fill`), then `finish` puts them in the layout the
    device's kernel reads. Every call goes through the int kernel where the device has one (the extension's panel
    kernel on a CPU that built it, else torch's), even prefill-sized ones that a GEMM on the dequantized weight would
    run faster: mixing the two paths by row count made a request's tokens depend on what it was batched with. A
    device without a kernel dequantizes the weight on every call.
    """

    def __init__(self, scheme: Quantization, in_features: int, out_features: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        self.scheme, self.in_features, self.out_features, self.out_dtype = scheme, in_features, out_features, dtype
        self.kernel = False
        self.panel_op: Callable[..., torch.Tensor] | None = None  # the extension's kernel, once `finish` repacks

    @property
    def dtype(self) -> torch.dtype:
        return self.out_dtype

    @property
    def device(self) -> torch.device:
        return self.scales.device

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self.buffers())

    def fill(self, name: str, tensor: torch.Tensor, rows: slice | None = None) -> None:
        """Copy one stored tensor (or the rows of one part of a stacked projection) into place."""
        getattr(self, name)[slice(None) if rows is None else rows] = tensor

    def finish(self) -> None:
        """Called once every row is filled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.kernel:
            return F.linear(x, self.dequantize().to(x.dtype))
        rows = x.reshape(-1, self.in_features)
        if self.panel_op is not None:
            out = self._panel_kernel(rows.float().contiguous())
        else:
            out = self._kernel(rows.to(KERNEL_DTYPE))
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    @abstractmethod
    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        """torch's int kernel for this scheme, on activations in KERNEL_DTYPE."""

    @abstractmethod
    def _panel_kernel(self, x: torch.Tensor) -> torch.Tensor:
        """The CPU extension's kernel, on fp32 activations."""

    @abstractmethod
    def dequantize(self) -> torch.Tensor:
        """The float weight (N, K) the quantized one stands for, in the model dtype."""


class Int8Linear(QuantizedLinear):
    def __init__(self, scheme: Quantization, in_features: int, out_features: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__(scheme, in_features, out_features, dtype, device)
        self.register_buffer("qweight", torch.empty(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("scales", torch.empty(out_features, dtype=KERNEL_DTYPE, device=device))
        self.kernel = has_kernel("aten::_weight_int8pack_mm", torch.device(device))

    def finish(self) -> None:
        """Repack into panels for the extension's kernel where it serves; torch's takes the weight as filled."""
        extension = panel_extension(self.device)
        if extension is None:
            return
        self.qweight = to_panels(self.qweight)
        self.kernel, self.panel_op = True, extension.int8_linear

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x, self.qweight, self.scales)

    def _panel_kernel(self, x: torch.Tensor) -> torch.Tensor:
        return self.panel_op(x, self.qweight, self.scales, self.out_features)

    def dequantize(self) -> torch.Tensor:
        qweight = self.qweight
        if self.panel_op is not None:
            qweight = qweight.movedim(-1, 1).flatten(0, 1)[:self.out_features]
        return qweight.to(self.out_dtype) * self.scales.to(self.out_dtype)[:, None]


class Int4Linear(QuantizedLinear):
    """Filled in the portable layout (two levels a byte, scales and zeros per row); `finish` packs it for torch's
    int4 kernel, whose layout depends on the device and CPU instruction set and so is never saved."""

    def __init__(self, scheme: Quantization, in_features: int, out_features: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__(scheme, in_features, out_features, dtype, device)
        self.group_size = scheme.group_size
        groups = in_features // scheme.group_size
        self.register_buffer("qweight", torch.empty(out_features, in_features // 2, dtype=torch.uint8, device=device))
        self.register_buffer("scales", torch.empty(out_features, groups, dtype=KERNEL_DTYPE, device=device))
        self.register_buffer("zeros", torch.empty(out_features, groups, dtype=KERNEL_DTYPE, device=device))

    def finish(self) -> None:
        """Repack for the kernel, when this device has one that takes this shape; else stay portable."""
        extension = panel_extension(self.device)
        if extension is not None:
            self._pack_panels(extension)
            return
        if not int4_kernel_takes(self.device, self.out_features, self.in_features):
            return
        self.qweight = pack_int4(self.qweight, self.in_features)
        self.scales = torch.stack([self.scales, self.zeros], dim=-1).transpose(0, 1).contiguous()
        del self.zeros
        self.kernel = True

    def _pack_panels(self, extension: ModuleType) -> None:
        self.qweight = int4_panels(self.qweight)
        self.scales, self.zeros = to_panels(self.scales), to_panels(self.zeros)
        self.kernel, self.panel_op = True, extension.int4_linear

    def _panel_kernel(self, x: torch.Tensor) -> torch.Tensor:
        return self.panel_op(x, self.qweight, self.scales, self.zeros, self.group_size, self.out_features)

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cpu":
            return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.qweight, self.group_size, self.scales)
        return torch.ops.aten._weight_int4pack_mm(x, self.qweight, self.group_size, self.scales)

    def dequantize(self) -> torch.Tensor:
        if self.kernel:
            raise RuntimeError("a packed int4 weight is only read by its kernel")
        levels = unpack_int4(self.qweight).reshape(self.out_features, -1, self.group_size).to(self.out_dtype)
        scales, zeros = self.scales.to(self.out_dtype)[..., None], self.zeros.to(self.out_dtype)[..., None]
        return ((levels - 8) * scales + zeros).reshape(self.out_features, self.in_features)


def is_quantized_module(name: str) -> bool:
    """The decoder layers' linears and the head; the embedding, vision tower and projector keep the model dtype."""
    return QUANTIZED_MODULES.match(name) is not None


def install(model: nn.Module, scheme: Quantization, dtype: torch.dtype,
            device: torch.device) -> dict[str, QuantizedLinear]:
    """Swap the quantized linears of a (meta) model for empty quantized ones → {weight parameter name: module}."""
    swapped = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and is_quantized_module(name):
            scheme.check_width(name, module.in_features)
            parent, _, attr = name.rpartition(".")
            quantized = scheme.module(module, dtype, torch.device(device))
            setattr(model.get_submodule(parent), attr, quantized)
            swapped[f"{name}.weight"] = quantized
    return swapped


def quantized_weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights quantization applies to (decoder linears, head; scales and zeros counted), quantized or
    not, so a float, an int8 and an int4 model compare like for like."""
    return sum(module.nbytes if isinstance(module, QuantizedLinear) else module.weight.nbytes
               for name, module in model.named_modules() if is_quantized_module(name))
