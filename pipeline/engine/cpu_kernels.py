"""The engine's compiled CPU kernels, built once per machine from csrc/ and cached by torch.

Building needs a C++ compiler and ninja; where either is missing the engine keeps its torch path, so a
kernel is always an optimisation, never a requirement. Set QUIRE_CPU_KERNELS=0 to use the torch path.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("csrc") / "paged_decode.cpp"


@functools.cache
def paged_decode_module() -> ModuleType | None:
    """The compiled paged-decode module, or None when it is disabled or cannot be built here."""
    if os.environ.get("QUIRE_CPU_KERNELS", "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        return load(name="quire_paged_decode", sources=[str(SOURCE)], verbose=False,
                    extra_cflags=["-O3", "-march=native", "-fopenmp"], extra_ldflags=["-fopenmp"])
    except Exception as exc:  # no compiler, no ninja, an exotic platform: the torch path serves
        log.warning("CPU paged-decode kernel unavailable, using the torch path: %s", exc)
        return None
