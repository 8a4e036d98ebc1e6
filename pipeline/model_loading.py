"""The recognition model as the settings ask for it, and the revision that names its exact weights: loaded the
same way by `quire process` (documents_api.py, when a region first needs it) and by a GPU worker's EngineHost
(workers/engine_host.py), which each turn a load that fails into what they report.

The engine's modules (its kernels, attention backends and Triton) are imported only when an engine is loaded, so
a document whose text layer serves every region starts and finishes without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.engine.model.loader import resolve_checkpoint
from pipeline.engine.model.revision import checkpoint_revision
from pipeline.engine_settings import engine_kwargs, weights_scheme

if TYPE_CHECKING:
    from pipeline.engine.engine import Engine


def load_engine(model: str, settings: Settings) -> Engine:
    """The engine on `model` (a local checkpoint or a hub id), built as the settings say; CheckpointError, with a
    stable code, when it does not load."""
    from pipeline.engine.engine import Engine  # only now that a model is wanted

    return Engine.from_pretrained(model, **engine_kwargs(settings))


def model_revision(model: str, settings: Settings) -> str:
    """The hub commit, or a fingerprint that reads a few MB, never the whole weights (and the weights' scheme, so a
    quantized engine never recalls a full-precision one's results); CheckpointError or OSError when the checkpoint
    cannot be read."""
    return checkpoint_revision(resolve_checkpoint(model), weights_scheme(settings))
