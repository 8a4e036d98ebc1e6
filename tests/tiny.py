"""The tiny checkpoint the suite runs on: the hub's files with a lower pixel floor.

The real floor (147,384 pixels) makes every crop at least 188 image tokens, so a test's text-line crop cost as much
as a page; at 56 x 56 a crop costs a few tokens and the suite's engine work shrinks several times over. Tests about
a version's own pixel limits ask for that version's spec; tests about image size, chunking or the KV budget size
their images and budgets to these prompts."""

from __future__ import annotations

from dataclasses import replace

from pipeline.samples.tiny_checkpoint import TinySpec

TEST_SPEC = TinySpec(min_pixels=56 * 56)


def tiny_spec(**changes: object) -> TinySpec:
    """The suite's spec with some fields changed (a seed, tied embeddings, the tensor layout)."""
    return replace(TEST_SPEC, **changes)
