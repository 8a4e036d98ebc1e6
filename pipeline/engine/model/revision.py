"""The revision that keys cached recognition results: which weights produced them.

Hashing ~1.9 GB of safetensors takes seconds, so a worker's start never reads all of it: a Hugging Face
snapshot already names its weights by the commit in its path, and a plain directory is named by a fingerprint
that reads its config, each weights file's size and header, and a few KiB at the start, middle and end of every
tensor. Training or fine-tuning changes every element of a tensor it touches, so a sample of each tensor tells
such weights apart, while a copy of the same weights anywhere keeps the same revision (and its cached results).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .loader import weight_files

_COMMIT = re.compile(r"[0-9a-f]{40}")
SAMPLE_BYTES = 4096


def checkpoint_revision(directory: Path, scheme: str = "none") -> str:
    """The hub commit of a snapshot in the Hugging Face cache, otherwise the fingerprint of config and weights;
    `+scheme` after it when the weights are quantized as they load, since their results differ from the float's."""
    revision = hub_commit(directory) or weights_fingerprint(
        sorted({directory / "config.json", *weight_files(directory).values()}))
    return revision if scheme == "none" else f"{revision}+{scheme}"


def hub_commit(directory: Path) -> str | None:
    """The commit a `…/snapshots/<commit>` directory of the Hugging Face cache holds, else None."""
    if directory.parent.name == "snapshots" and _COMMIT.fullmatch(directory.name):
        return directory.name
    return None


def weights_fingerprint(files: list[Path]) -> str:
    """SHA-256 over each file's name and size and the byte ranges `_sampled_ranges` picks from it."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as handle:
            for start, length in _sampled_ranges(path, handle):
                handle.seek(start)
                digest.update(handle.read(length))
    return digest.hexdigest()


def _sampled_ranges(path: Path, handle: BinaryIO) -> Iterator[tuple[int, int]]:
    """A safetensors file: its header (names, dtypes, shapes, offsets) and samples of every tensor; others whole."""
    if path.suffix != ".safetensors":
        yield 0, path.stat().st_size
        return
    (header_length,) = struct.unpack("<Q", handle.read(8))
    header = json.loads(handle.read(header_length))
    data = 8 + header_length
    yield 0, data
    for name in sorted(header):
        if name != "__metadata__":
            begin, end = header[name]["data_offsets"]
            yield from ((data + offset, length) for offset, length in _tensor_samples(begin, end))


def _tensor_samples(begin: int, end: int) -> list[tuple[int, int]]:
    if end - begin <= 3 * SAMPLE_BYTES:
        return [(begin, end - begin)]
    middle = (begin + end - SAMPLE_BYTES) // 2
    return [(begin, SAMPLE_BYTES), (middle, SAMPLE_BYTES), (end - SAMPLE_BYTES, SAMPLE_BYTES)]
