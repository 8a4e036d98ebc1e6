"""Where a step's time goes: scheduling, host preparation, the model's forward pass, sampling, bookkeeping.

The engine always keeps these totals (they are cheap); a benchmark sets `sync` so that device work is waited for at
the end of the phase that queued it (otherwise a GPU's forward time shows up in `sample`, which reads the ids).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

PHASES = ("schedule", "prepare", "forward", "sample", "update")
T = TypeVar("T")


class PhaseClock:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sync = False
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def __call__(self, phase: str, work: Callable[..., T], *args: object) -> T:
        started = time.perf_counter()
        result = work(*args)
        if self.sync and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds[phase] += time.perf_counter() - started
        return result
