"""What `auto` means for the engine's device, dtype and batch size: the GPU when there is one, and its defaults.

A GPU worker is started with no device settings at all, so `auto` must pick CUDA and bf16 there (fp32 would halve
the throughput and double the KV memory). On a CPU `auto` picks bf16 only where the processor computes it natively
(AVX512-BF16 or AMX): elsewhere every bf16 product is emulated through fp32 conversions, slower than fp32 itself.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MAX_NUM_SEQS = {"cuda": 256, "cpu": 32}
MAX_NUM_BATCHED_TOKENS = {"cuda": 8192, "cpu": 4096}
EXIT_DEVICE_FAILED = 70  # EX_SOFTWARE: the supervisor restarts the process
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
ISA_LEVELS = (("amx", frozenset({"amx_tile", "amx_bf16"})), ("avx512_bf16", frozenset({"avx512_bf16"})),
              ("avx512", frozenset({"avx512f"})), ("avx2", frozenset({"avx2", "fma"})))
STICKY_ERRORS = ("CUDA error", "CUBLAS_STATUS", "cuDNN error", "device-side assert")


def resolve_device(name: str) -> torch.device:
    """`auto` → the first CUDA device when torch sees one, else the CPU; anything else as torch spells it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` → bf16 on CUDA and on a CPU that computes it natively, fp32 elsewhere; a name outside DTYPES is refused
    with the choices."""
    if name == "auto":
        native = device.type == "cuda" or (device.type == "cpu" and computes_bf16(cpu_flags()))
        return torch.bfloat16 if native else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, not {name!r}")
    return DTYPES[name]


def computes_bf16(flags: str) -> bool:
    """Whether a CPU with these /proc/cpuinfo flags has bf16 arithmetic, not just conversions (AVX2 and plain
    AVX512 only convert, so their bf16 GEMMs run slower than fp32 ones)."""
    return not BF16_FLAGS.isdisjoint(flags.split())


def cpu_flags() -> str:
    """The first processor's flags from /proc/cpuinfo; empty where there is none (not Linux, or not x86)."""
    return _cpuinfo_field("flags")


def cpu_isa(flags: str) -> str:
    """The widest matrix arithmetic these flags offer, the first that applies of ISA_LEVELS: what a CPU figure
    depends on most, since the processor here changes from day to day."""
    present = set(flags.split())
    return next((name for name, needed in ISA_LEVELS if needed <= present), "baseline")


def cpu_description() -> dict[str, str]:
    """This machine's processor, for a benchmark's figures to say where they were measured."""
    return {"cpu_model": _cpuinfo_field("model name").strip() or "unknown", "cpu_isa": cpu_isa(cpu_flags())}


def _cpuinfo_field(name: str) -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line.partition(":")[2] for line in text.splitlines() if line.split(":")[0].strip() == name), "")


def default_for(table: dict[str, int], device: torch.device) -> int:
    return table.get(device.type, table["cpu"])


def is_sticky_device_error(exc: BaseException) -> bool:
    """A CUDA error that poisons the context: every later call fails too (an out-of-memory error does not)."""
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    return isinstance(exc, RuntimeError) and any(mark in str(exc) for mark in STICKY_ERRORS)


def exit_on_device_failure(exc: BaseException) -> None:
    """End the process with one clear line, so its supervisor starts a fresh one instead of a worker that stays up
    failing every request; work it held is delivered again (the tasks are acknowledged late)."""
    log.critical("the GPU failed and cannot recover in this process, exiting with %d: %s",
                 EXIT_DEVICE_FAILED, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    logging.shutdown()
    os._exit(EXIT_DEVICE_FAILED)
