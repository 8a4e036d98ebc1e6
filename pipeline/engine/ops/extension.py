"""The engine's compiled CPU extension, built once per machine from csrc/: the paged decode kernel, the vision
tower's flash attention, the int8/int4 panel GEMMs and OpenMP thread binding.

Building needs a C++ compiler and ninja; where either is missing the engine keeps its torch path, so a
kernel is always an optimisation, never a requirement. Set QUIRE_CPU_KERNELS=0 to use the torch path (that switch
turns off oneDNN prepacking too, prepack.py).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)
CSRC = Path(__file__).with_name("csrc")
SOURCES = sorted(CSRC.glob("*.cpp"))
CFLAGS = ["-O3", "-march=native", "-fopenmp"]
LDFLAGS = ["-fopenmp"]
STALE_LOCK_S = 600  # a build takes well under a minute; a lock this old was left by a killed builder


def enabled() -> bool:
    """Whether the CPU fast paths may be used (QUIRE_CPU_KERNELS, on unless set to 0)."""
    return os.environ.get("QUIRE_CPU_KERNELS", "1") != "0"


@functools.cache
def extension_module() -> ModuleType | None:
    """The compiled CPU extension (paged decode, vision attention, thread binding), or None when it is disabled or
    cannot be built."""
    if not enabled():
        return None
    try:
        return _built_module()
    except Exception as exc:  # no compiler, no ninja, an exotic platform: the torch path serves
        log.warning("CPU paged-decode kernel unavailable, using the torch path: %s", exc)
        return None


def _built_module() -> ModuleType:
    """The module from its build directory, built there first if it is not yet.

    The directory is named by a digest of the source, flags and torch version, so every checkout and virtualenv on
    the machine shares one build and a change makes a new one (torch's own versioning rebuilt in place whenever two
    checkouts alternated, every process waiting on the rebuild's lock). A built library is imported directly,
    without torch's build lock: a process killed while holding that lock leaves it behind, and every later load
    would wait on it forever. A lock older than STALE_LOCK_S is such a leftover and is removed before building.
    """
    from torch.utils.cpp_extension import get_default_build_root, load

    code = b"".join(path.read_bytes() for path in sorted(CSRC.iterdir()) if path.suffix in (".cpp", ".h"))
    digest = hashlib.sha256(code + repr((CFLAGS, LDFLAGS, torch.__version__)).encode()).hexdigest()
    name = f"quire_cpu_kernels_{digest[:16]}"
    directory = Path(get_default_build_root()) / name
    library = directory / f"{name}.so"
    if library.exists():
        return _import_library(name, library)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
        lock.unlink(missing_ok=True)
    ensure_ninja_on_path()
    return load(name=name, sources=[str(path) for path in SOURCES], build_directory=str(directory), verbose=False,
                extra_cflags=CFLAGS, extra_ldflags=LDFLAGS)


def _import_library(name: str, library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_ninja_on_path() -> None:
    """torch's builder runs `ninja` from PATH; without a system one, use the pip package's (a dependency)."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
