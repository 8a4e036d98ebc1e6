"""`auto` picks bf16 where it is computed natively (CUDA, CPUs with AVX512-BF16 or AMX) and fp32 elsewhere."""

from __future__ import annotations

import pytest
import torch

from pipeline.engine import devices
from pipeline.engine.devices import computes_bf16, cpu_isa, resolve_dtype

AVX2 = "fpu sse sse2 avx avx2 fma f16c"
AVX512 = AVX2 + " avx512f avx512bw avx512vl avx512dq avx512_vnni"


@pytest.mark.parametrize("flags", [AVX512 + " avx512_bf16", AVX512 + " amx_bf16 amx_tile amx_int8"])
def test_a_cpu_with_bf16_arithmetic_computes_bf16(flags):
    assert computes_bf16(flags)


@pytest.mark.parametrize("flags", [AVX2, AVX512, ""])
def test_a_cpu_that_only_converts_bf16_does_not(flags):
    assert not computes_bf16(flags)


@pytest.mark.parametrize(("flags", "dtype"), [(AVX2, torch.float32), (AVX512 + " avx512_bf16", torch.bfloat16)])
def test_auto_on_a_cpu_follows_its_flags(monkeypatch, flags, dtype):
    monkeypatch.setattr(devices, "cpu_flags", lambda: flags)
    assert resolve_dtype("auto", torch.device("cpu")) == dtype


def test_auto_on_cuda_is_bf16_whatever_the_host_cpu(monkeypatch):
    monkeypatch.setattr(devices, "cpu_flags", lambda: AVX2)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


def test_a_named_dtype_is_taken_as_asked(monkeypatch):
    monkeypatch.setattr(devices, "cpu_flags", lambda: AVX2)
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16


def test_an_unknown_dtype_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="bfloat16"):
        resolve_dtype("int8", torch.device("cpu"))


def test_this_machines_flags_are_read():
    """On Linux x86 the flags line is there; elsewhere it is empty and `auto` stays fp32."""
    flags = devices.cpu_flags()
    assert flags == "" or "sse2" in flags.split()


@pytest.mark.parametrize(("flags", "isa"), [
    (AVX512 + " avx512_bf16 amx_bf16 amx_tile amx_int8", "amx"), (AVX512 + " avx512_bf16", "avx512_bf16"),
    (AVX512, "avx512"), (AVX2, "avx2"), ("fpu sse sse2", "baseline"), ("", "baseline")])
def test_a_cpu_is_named_by_its_widest_matrix_arithmetic(flags, isa):
    assert cpu_isa(flags) == isa


def test_this_machines_processor_is_described():
    description = devices.cpu_description()
    assert description["cpu_isa"] == cpu_isa(devices.cpu_flags())
    assert description["cpu_model"]
