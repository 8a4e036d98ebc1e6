"""A process's layout backends: loaded once, on the layout device (else the engine's), and before the engine when
the process hosts both."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.config import Settings
from pipeline.documents.layout_model import PPDocLayout
from pipeline.documents.layout_weights import LayoutModelUnavailable
from pipeline.jobs import context as context_module
from pipeline.jobs.context import Context, open_context


class Nowhere:
    """A dispatcher for contexts that send nothing."""

    def send(self, stage: str, key: str | int, delay_s: float = 0.0) -> None:
        raise AssertionError(f"nothing is sent here, not {stage}({key})")


def context(tmp_path: Path, **settings: object) -> Context:
    resolved = Settings(cache_dir=tmp_path, _env_file=None, **settings)
    return open_context(resolved, Nowhere())


def test_the_layout_model_loads_on_the_engines_device_unless_a_layout_device_is_set(tmp_path: Path,
                                                                                     layout_checkpoint_factory):
    model = str(layout_checkpoint_factory())
    on_engines = context(tmp_path, device="cpu", layout_model=model).layout("pp-doclayout")
    on_its_own = context(tmp_path, device="cpu", layout_device="meta", layout_model=model).layout("pp-doclayout")
    assert isinstance(on_engines, PPDocLayout) and isinstance(on_its_own, PPDocLayout)
    assert (on_engines.device, on_its_own.device) == (torch.device("cpu"), torch.device("meta"))
    assert next(on_its_own.model.parameters()).device == torch.device("meta")


def test_preload_loads_the_default_layout_once_for_every_later_page(tmp_path: Path, layout_checkpoint_factory,
                                                                    monkeypatch: pytest.MonkeyPatch):
    loaded = []
    real = context_module.layout_backend
    monkeypatch.setattr(context_module, "layout_backend", lambda *args: loaded.append(args[0]) or real(*args))
    ctx = context(tmp_path, device="cpu", layout="pp-doclayout", layout_model=str(layout_checkpoint_factory()))
    ctx.preload_layout()
    assert loaded == ["pp-doclayout"]
    assert isinstance(ctx.layout("pp-doclayout"), PPDocLayout) and loaded == ["pp-doclayout"]


def test_preload_leaves_missing_layout_weights_for_each_page_to_report(tmp_path: Path):
    ctx = context(tmp_path, layout="pp-doclayout", layout_model=str(tmp_path / "missing"))
    ctx.preload_layout()
    with pytest.raises(LayoutModelUnavailable):
        ctx.layout("pp-doclayout")
