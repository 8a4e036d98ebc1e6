"""The compiled CPU extension, for the tests of the kernels that need it."""

from __future__ import annotations

import pytest

from pipeline.engine.ops.extension import extension_module


@pytest.fixture(scope="module")
def kernel():
    module = extension_module()
    assert module is not None, "this machine has a compiler and ninja: the kernel must build"
    return module
