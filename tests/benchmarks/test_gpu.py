"""benchmarks/gpu.py keeps working without a GPU: `--device cpu --small` runs every section at tiny size, the fused
attention under Triton's interpreter, and each section leaves its JSON line."""

from __future__ import annotations

import json

import pytest

from benchmarks import gpu

pytest.importorskip("triton")


def test_every_section_runs_at_tiny_size_on_the_cpu_and_appends_its_line(tmp_path):
    out = tmp_path / "gpu.json"
    assert gpu.main(["--device", "cpu", "--small", "--out", str(out)]) == 0
    records = {record["section"]: record for record in map(json.loads, out.read_text().splitlines())}
    assert list(records) == list(gpu.SECTIONS)
    assert not [name for name, record in records.items() if "error" in record]
    parity = records["parity"]
    assert parity["fp32_equal_to_cpu"] == parity["fp32_requests"] == 2
    assert 0 < parity["bf16_text_tokens"]
    for size in (2, 4, 8):
        phases = records["decode"][f"seqs_{size}"]
        assert set(phases) == {"schedule", "prepare", "forward", "sample", "update", "step_ms", "tok_s"}
        assert phases["tok_s"] > 0
    assert records["end_to_end"]["output_tokens"] > 0 and records["vision"]["crops"] == 4
    assert records["layout"]["batch_16_ms_per_page"] > 0 and records["profile"]["eager"]["wall_ms"] > 0
    quantized = records["quantized"]
    assert quantized["int4"]["weight_bytes"] < quantized["int8"]["weight_bytes"] < quantized["none"]["weight_bytes"]
    assert 0 < quantized["int8"]["logit_rel_err"] < quantized["int4"]["logit_rel_err"] < 1
