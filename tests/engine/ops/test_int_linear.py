"""The CPU extension's int8/int4 linears give the dequantized weight's products, each row's independent of its
batch, and refuse what they cannot take."""

from __future__ import annotations

import pytest
import torch

from pipeline.engine.model.quantization import Quantization
from pipeline.engine.ops.int_linear import to_panels, unpack_int4


def _quantized_weight(scheme: Quantization, rows: int, width: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """A random weight's stored tensors, and the fp32 weight they stand for."""
    weight = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows + width))
    stored = scheme.quantize(weight)
    if scheme.group_size is None:
        return stored, stored["qweight"].float() * stored["scales"].float()[:, None]
    levels = unpack_int4(stored["qweight"]).float().reshape(rows, -1, scheme.group_size)
    scales, zeros = stored["scales"].float()[..., None], stored["zeros"].float()[..., None]
    return stored, ((levels - 8) * scales + zeros).reshape(rows, width)


def _panel_call(kernel, scheme: Quantization, stored: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    rows = stored["scales"].shape[0]
    if scheme.group_size is None:
        return kernel.int8_linear(x, to_panels(stored["qweight"]), stored["scales"], rows)
    levels = to_panels(unpack_int4(stored["qweight"]))
    packed = levels[..., :8] | levels[..., 8:] << 4
    return kernel.int4_linear(x, packed, to_panels(stored["scales"]), to_panels(stored["zeros"]), scheme.group_size,
                              rows)


PANEL_SCHEMES = [Quantization.parse("int8")] + [Quantization.parse("int4", size) for size in (32, 64, 128)]


@pytest.mark.parametrize("scheme", PANEL_SCHEMES, ids=str)
@pytest.mark.parametrize(("rows", "width"), [(40, 128), (1024, 256), (17, 384), (48, 3072)])
@pytest.mark.parametrize("batch", [1, 3, 16, 33])
def test_panel_kernels_match_the_dequantized_weight_in_fp32(kernel, scheme, rows, width, batch):
    stored, weight = _quantized_weight(scheme, rows, width)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(batch))
    out = _panel_call(kernel, scheme, stored, x)
    torch.testing.assert_close(out, x @ weight.T, atol=1e-5 * width ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("scheme", PANEL_SCHEMES, ids=str)
def test_a_row_gets_the_same_bits_alone_and_in_any_batch(kernel, scheme):
    """The engine's batching parity rests on this: a row's sums never depend on the rows beside it."""
    stored, _ = _quantized_weight(scheme, 72, 512)
    x = torch.randn(33, 512, generator=torch.Generator().manual_seed(0))
    batched = _panel_call(kernel, scheme, stored, x)
    for start, stop in ((0, 1), (5, 6), (0, 7), (9, 25), (32, 33)):
        assert torch.equal(_panel_call(kernel, scheme, stored, x[start:stop]), batched[start:stop])


def test_an_int4_width_the_group_size_does_not_divide_is_refused(kernel):
    stored, _ = _quantized_weight(Quantization.parse("int4", 32), 16, 96)
    with pytest.raises(RuntimeError, match="group size must divide 256 and K"):
        _panel_call(kernel, Quantization.parse("int4", 64), stored, torch.randn(2, 96))


def test_activations_other_than_contiguous_fp32_are_refused(kernel):
    scheme = Quantization.parse("int8")
    stored, _ = _quantized_weight(scheme, 16, 64)
    for x in (torch.randn(2, 64, dtype=torch.bfloat16), torch.randn(64, 2).T, torch.randn(2, 32)):
        with pytest.raises(RuntimeError):
            _panel_call(kernel, scheme, stored, x)
