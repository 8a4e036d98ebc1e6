"""The CPU vision attention kernel: within each frame of a packed batch it gives SDPA's result, as close to fp32
attention over the same bf16 inputs as bf16 SDPA is, whatever the frame length; the runner uses it for a bf16 tower
on a CPU that has it, and SDPA for an fp32 one."""

from __future__ import annotations

import pytest
import torch

from pipeline.engine.engine import Engine
from pipeline.engine.model.vision_layout import VisionLayout
from pipeline.engine.ops.attention import heads_attention
from pipeline.engine.ops.extension import extension_module
from pipeline.engine.ops.vision_attention import KernelVisionAttention, SplitAttention
from pipeline.engine.request import Request
from tests.reference import random_image

HEADS, DIM = 16, 72  # the real vision tower's


@pytest.fixture(scope="module")
def kernel():
    module = extension_module()
    if module is None:
        pytest.skip("the CPU extension is not built here (disabled, or no compiler or ninja)")
    if not module.vision_attention_supported():
        pytest.skip("this CPU has no AVX512-BF16, so the extension has no vision attention kernel")
    return module


def _model_views(n: int, seed: int, sharpness: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v laid out as VisionAttention hands them: q and k split from one rotated tensor, v a slice of qkv."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(n, 3 * HEADS, DIM, generator=g).bfloat16()
    rotated = (qkv[:, :2 * HEADS].float() * sharpness).bfloat16()
    q, k = rotated.split(HEADS, dim=1)
    return q, k, qkv[:, 2 * HEADS:]


def _assert_as_close_as_sdpa(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Against fp32 attention over the same bf16 inputs. Both round the probabilities and the output to bf16, which
    dominates the error: on average the kernel is no further off than bf16 SDPA, and at worst by half a bf16 step of
    the largest output more (one rounding the other way)."""
    exact = heads_attention(q.float(), k.float(), v.float())
    sdpa_error = (heads_attention(q, k, v).float() - exact).abs()
    kernel_error = (out.float() - exact).abs()
    assert kernel_error.mean() <= 1.1 * sdpa_error.mean() + 1e-6
    assert kernel_error.max() <= sdpa_error.max() + exact.abs().max() * 2 ** -8


@pytest.mark.parametrize("length", [1, 5, 17, 64, 333, 1000])
@pytest.mark.parametrize("sharpness", [1.0, 3.0])
def test_one_frame_matches_sdpa(kernel, length, sharpness):
    q, k, v = _model_views(length, seed=length, sharpness=sharpness)
    assert q.stride(0) == k.stride(0) == 2 * HEADS * DIM and v.stride(0) == 3 * HEADS * DIM  # rows apart
    out = kernel.vision_attention(q, k, v, [length], DIM ** -0.5)
    assert out.shape == (length, HEADS, DIM) and out.dtype == torch.bfloat16
    _assert_as_close_as_sdpa(out, q, k, v)


def test_packed_frames_attend_only_within_themselves(kernel):
    lengths = [333, 5, 1000]
    q, k, v = _model_views(sum(lengths), seed=7)
    out = kernel.vision_attention(q, k, v, lengths, DIM ** -0.5)
    parts = zip(out.split(lengths), q.split(lengths), k.split(lengths), v.split(lengths), strict=True)
    for frame_out, frame_q, frame_k, frame_v in parts:
        _assert_as_close_as_sdpa(frame_out, frame_q, frame_k, frame_v)


def test_the_attend_class_matches_split_attention(kernel):
    layout = VisionLayout([(1, 8, 12), (2, 4, 6)], 2, torch.device("cpu"))
    q, k, v = _model_views(sum(layout.lengths), seed=3)
    expected = SplitAttention(layout)(q, k, v)
    torch.testing.assert_close(KernelVisionAttention(layout)(q, k, v), expected, atol=2e-2, rtol=2e-2)


def _tower_attention(checkpoint, dtype: str, monkeypatch) -> list[type]:
    """The attention classes the runner hands the vision tower while serving one image request."""
    engine = Engine.from_pretrained(checkpoint, dtype=dtype)
    seen: list[type] = []
    encode = engine.model.encode_images

    def spy(pixels, grids, attend):
        seen.append(attend)
        return encode(pixels, grids, attend)

    monkeypatch.setattr(engine.model, "encode_images", spy)
    engine.generate([Request(prompt="OCR:", images=[random_image(60, 40)], max_tokens=1)])
    return seen


def test_the_runner_uses_the_kernel_for_a_bf16_tower(kernel, tiny_checkpoint, monkeypatch):
    assert _tower_attention(tiny_checkpoint, "bfloat16", monkeypatch) == [KernelVisionAttention]


def test_the_runner_keeps_sdpa_for_an_fp32_tower(tiny_checkpoint, monkeypatch):
    assert _tower_attention(tiny_checkpoint, "float32", monkeypatch) == [SplitAttention]
