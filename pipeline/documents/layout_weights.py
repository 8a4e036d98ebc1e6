"""Where PP-DocLayout weights are: a local directory, the Hugging Face cache, or (on request) the hub.

Kept apart from the model code so that `auto` can ask "are the weights here?" without importing torch, and
never touches the network to answer: only an explicit `pp-doclayout` request may download.
"""

from __future__ import annotations

from pathlib import Path

WEIGHT_FILES = ["*.json", "*.safetensors"]


class LayoutModelUnavailable(RuntimeError):
    """The layout model asked for is neither on this machine nor fetchable; the message says how to get it."""


def how_to_get(model: str) -> str:
    return (
        f"Fetch it into the Hugging Face cache with `quire models pull --layout-model {model}` on a connected "
        "machine (or with `--dir DIR`, then set QUIRE_LAYOUT_MODEL=DIR/NAME); or choose the model-free layout with "
        "`--layout pdf` (born-digital PDFs) or `--layout page`."
    )


def local_layout_weights(model: str) -> Path | None:
    """The checkpoint directory for `model` (a path or a hub id) if it is on this machine, else None. Offline."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path if _complete(path) else None
    if _looks_like_path(model):
        return None
    from huggingface_hub import snapshot_download

    try:
        cached = Path(snapshot_download(model, allow_patterns=WEIGHT_FILES, local_files_only=True))
    except Exception:  # not cached, or not a valid repo id: either way, not here
        return None
    return cached if _complete(cached) else None


def resolve_layout_weights(model: str) -> Path:
    """The checkpoint directory for `model`, downloading a hub id unless the hub is switched off (HF_HUB_OFFLINE)."""
    local = local_layout_weights(model)
    if local is not None:
        return local
    if _looks_like_path(model) or Path(model).expanduser().exists():
        raise LayoutModelUnavailable(f"{model}: not a PP-DocLayout checkpoint directory. {how_to_get(model)}")
    from huggingface_hub import constants, snapshot_download

    if constants.HF_HUB_OFFLINE:
        raise LayoutModelUnavailable(f"{model}: not in the Hugging Face cache and HF_HUB_OFFLINE is set. "
                                     f"{how_to_get(model)}")
    try:
        fetched = Path(snapshot_download(model, allow_patterns=WEIGHT_FILES))
    except Exception as exc:  # offline, unknown repo, gated: all mean "not available here"
        message = f"{model}: could not be fetched from the hub ({exc}). {how_to_get(model)}"
        raise LayoutModelUnavailable(message) from exc
    if not _complete(fetched):
        raise LayoutModelUnavailable(f"{model}: the hub copy has no config.json or safetensors. {how_to_get(model)}")
    return fetched


def _complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and any(directory.glob("*.safetensors"))


def _looks_like_path(model: str) -> bool:
    """A hub id is `owner/name`; anything starting like a path, or with more parts, is meant as a directory."""
    return model.startswith((".", "/", "~")) or model.count("/") != 1
