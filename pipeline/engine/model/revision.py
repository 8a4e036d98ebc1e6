"""The revision that keys cached recognition results: which weights produced them.

Hashing ~1.9 GB of safetensors takes tens of seconds, so it is never done on every start: a Hugging Face
snapshot already names its weights by the commit in its path, and a plain directory's digest is computed
once and kept in a small JSON file, keyed by each file's path, size and mtime, so a changed file is re-hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from .loader import weight_files

_COMMIT = re.compile(r"[0-9a-f]{40}")


def checkpoint_revision(directory: Path, cache_file: Path | None = None) -> str:
    """The hub commit of a snapshot in the Hugging Face cache; otherwise the SHA-256 of config and weights, read
    from `cache_file` while no file changed since it was computed (no `cache_file`: computed every time)."""
    commit = hub_commit(directory)
    if commit is not None:
        return commit
    files = sorted({directory / "config.json", *weight_files(directory).values()})
    stamp = [[str(path.resolve()), *_size_and_mtime(path)] for path in files]
    known = _read(cache_file) if cache_file else {}
    key = str(directory.resolve())
    if known.get(key, {}).get("files") == stamp:
        return known[key]["revision"]
    revision = content_digest(files)
    if cache_file:
        _write(cache_file, known | {key: {"files": stamp, "revision": revision}})
    return revision


def hub_commit(directory: Path) -> str | None:
    """The commit a `…/snapshots/<commit>` directory of the Hugging Face cache holds, else None."""
    if directory.parent.name == "snapshots" and _COMMIT.fullmatch(directory.name):
        return directory.name
    return None


def content_digest(files: list[Path]) -> str:
    """SHA-256 over each file's name and bytes: the same weights give the same digest wherever they are copied."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()


def _size_and_mtime(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _read(cache_file: Path) -> dict:
    try:
        return json.loads(cache_file.read_text())
    except (OSError, ValueError):  # absent or half-written by a killed process: computed again
        return {}


def _write(cache_file: Path, known: dict) -> None:
    """Atomically, as several worker processes on one machine may start at once."""
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=cache_file.parent, suffix=".tmp", delete=False) as handle:
        json.dump(known, handle, indent=1)
    os.replace(handle.name, cache_file)
