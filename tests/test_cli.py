"""The README's main command works end to end, and bad inputs come back as errors, not tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _quire(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QUIRE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_demo_writes_a_tiny_checkpoint_and_prints_text_and_timings(tmp_path):
    done = _quire("demo", "--max-tokens", "8", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["generated_tokens"] == 8 or result["finish_reason"] == "stop"
    assert result["text"] and result["ttft_ms"] > 0
    assert (tmp_path / "tiny-checkpoint" / "model.safetensors").exists()


def test_recognize_reports_a_bad_image_by_code(tmp_path, tiny_checkpoint):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image at all")
    done = _quire("recognize", str(bad), "--model", str(tiny_checkpoint), cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip())["error"] == "undecodable"


@pytest.mark.parametrize("model", ["./no-such-dir", "PaddlePaddle/not-downloaded-here"])
def test_an_unavailable_model_says_how_to_get_one(tmp_path, model):
    image = tmp_path / "x.png"
    image.write_bytes(b"")
    done = _quire("recognize", str(image), "--model", model, cache=tmp_path)
    assert done.returncode == 2
    assert "quire demo" in done.stderr and "Traceback" not in done.stderr
