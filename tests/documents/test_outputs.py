"""Output files are named after their inputs, without two inputs writing over each other."""

from __future__ import annotations

from pathlib import Path

from pipeline.documents.outputs import output_names


def test_output_names_are_stems_unless_two_inputs_share_one():
    names = output_names([Path("in/a.pdf"), Path("in/a.png"), Path("in/b.tiff")])
    assert names == {Path("in/a.pdf"): "a.pdf", Path("in/a.png"): "a.png", Path("in/b.tiff"): "b"}
