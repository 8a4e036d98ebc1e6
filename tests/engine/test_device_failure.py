"""A sticky CUDA error ends the engine's process with one clear line (its supervisor restarts it); other errors fail
only the step's requests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.engine.devices import EXIT_DEVICE_FAILED, is_sticky_device_error

SCRIPT = """
import logging, sys
from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
logging.basicConfig(format="%(levelname)s %(message)s")
engine = Engine.from_pretrained(sys.argv[1])
def broken(batch, tensors):
    raise RuntimeError("CUDA error: an illegal memory access was encountered\\nCompile with TORCH_USE_CUDA_DSA")
engine.runner.forward = broken
engine.submit(Request(prompt="hello", max_tokens=2)).result(timeout=60)
print("still serving")
"""


@pytest.mark.slow
def test_a_sticky_cuda_error_in_the_loop_ends_the_process_with_one_line(tiny_checkpoint):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_checkpoint)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == EXIT_DEVICE_FAILED, done.stderr
    assert "still serving" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("CRITICAL")]
    assert lines == [f"CRITICAL the GPU failed and cannot recover in this process, exiting with {EXIT_DEVICE_FAILED}: "
                     "CUDA error: an illegal memory access was encountered"]


def test_only_errors_that_poison_the_device_count_as_sticky():
    assert is_sticky_device_error(RuntimeError("CUDA error: device-side assert triggered"))
    assert is_sticky_device_error(RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx"))
    assert not is_sticky_device_error(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert not is_sticky_device_error(ValueError("4 image placeholder tokens but 3 image embeddings"))
