"""The CPU extension is an optimisation the operator can switch off, and builds without a system ninja."""

from __future__ import annotations

import shutil

from pipeline.engine.ops import extension


def test_the_kernel_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("QUIRE_CPU_KERNELS", "0")
    extension.extension_module.cache_clear()
    try:
        assert extension.extension_module() is None
    finally:
        extension.extension_module.cache_clear()


def test_the_pip_ninja_serves_where_the_system_has_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    extension.ensure_ninja_on_path()
    assert shutil.which("ninja") is not None
