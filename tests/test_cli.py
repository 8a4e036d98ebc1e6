"""The README's main command works end to end, and bad inputs come back as errors, not tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from pipeline.documents.assemble import load_schema
from pipeline.documents.overlay import colour_for


def _quire(*args: str, cache: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUIRE_")}
    env.update(QUIRE_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1", **env_vars)
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


# --- quire process --------------------------------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
FAST = ("--layout", "pdf", "--dpi", "40", "--text-layer", "off", "--max-tokens", "4")


def test_process_writes_markdown_json_and_page_images_with_overlays(tmp_path, tiny_checkpoint):
    from PIL import Image

    out = tmp_path / "out"
    done = _quire("process", str(CORPUS / "pdflatex-4-pages.pdf"), "-o", str(out), "--model", str(tiny_checkpoint),
                  *FAST, cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "pdflatex-4-pages.pdf: 4 pages, succeeded" in done.stderr
    result = json.loads((out / "pdflatex-4-pages.json").read_text())
    jsonschema.validate(result, load_schema())
    assert (result["status"], result["page_count"], result["model"]) == ("succeeded", 4, str(tiny_checkpoint))
    assert [[r["label"] for r in page["regions"]] for page in result["pages"]] == [["text", "number"]] * 4
    regions = [region for page in result["pages"] for region in page["regions"]]
    assert all(region["source"] == "model" and region["tokens"]["generated"] <= 4 for region in regions)
    markdown = (out / "pdflatex-4-pages.md").read_text()
    assert markdown == "\n\n".join(page["markdown"] for page in result["pages"] if page["markdown"]) + "\n"
    pages = out / "pdflatex-4-pages.pages"
    assert sorted(p.name for p in pages.iterdir()) == [f"page-000{i}{kind}.png" for i in range(1, 5)
                                                       for kind in (".overlay", "")]
    page, overlay = Image.open(pages / "page-0001.png"), Image.open(pages / "page-0001.overlay.png")
    assert page.size == overlay.size == (result["pages"][0]["width_px"], result["pages"][0]["height_px"])
    x0, y0, x1, y1 = result["pages"][0]["regions"][0]["bbox_px"]
    assert overlay.getpixel((int(x0) - 1, int((y0 + y1) / 2))) == colour_for("text")  # just left of the text box


def test_process_takes_a_directory_skips_finished_inputs_and_reports_bad_ones(tmp_path, tiny_checkpoint):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    (inbox / "letter.pdf").write_bytes((CORPUS / "minimal-document.pdf").read_bytes())
    (inbox / "notes.txt").write_text("not a document: not picked from a directory")
    bad = tmp_path / "report.pdf"
    bad.write_text("<!doctype html><p>an HTML page saved as .pdf</p>")
    args = ("process", str(inbox), str(bad), "-o", str(out), "--model", str(tiny_checkpoint), *FAST)

    first = _quire(*args, cache=tmp_path)
    assert first.returncode == 1, first.stderr  # one input failed
    assert sorted(p.name for p in out.iterdir()) == ["letter.json", "letter.md", "letter.pages", "report.json"]
    failed = json.loads((out / "report.json").read_text())
    assert (failed["status"], failed["error"]["code"]) == ("failed", "unsupported_format")
    jsonschema.validate(failed, load_schema())

    again = _quire(*args, cache=tmp_path)
    assert again.returncode == 0 and again.stderr.count("skip ") == 2

    (out / "letter.pages" / "stale.png").write_bytes(b"")
    forced = _quire(*args, "--force", cache=tmp_path)
    assert forced.returncode == 1 and "skip " not in forced.stderr
    assert not (out / "letter.pages" / "stale.png").exists()


def test_process_without_the_weights_says_how_to_get_them_and_how_to_run_the_demo_model(tmp_path):
    done = _quire("process", str(CORPUS / "minimal-document.pdf"), "-o", str(tmp_path / "out"),
                  "--model", "PaddlePaddle/not-downloaded-here", cache=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "huggingface-cli download" in done.stderr and "quire demo" in done.stderr
    assert f"--model {tmp_path / 'tiny-checkpoint'}" in done.stderr


def test_process_without_the_layout_model_says_how_to_get_it_and_names_the_model_free_layouts(tmp_path):
    done = _quire("process", str(CORPUS / "minimal-document.pdf"), "-o", str(tmp_path / "out"),
                  "--layout", "pp-doclayout", "--layout-model", str(tmp_path / "no-layout-model"), cache=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--layout pdf" in done.stderr and not (tmp_path / "out").exists()


# --- quire serve / quire worker ----------------------------------------------------------------------------------


def test_serve_without_the_weights_says_how_to_try_the_demo_checkpoint(tmp_path):
    done = _quire("serve", "--port", "0", cache=tmp_path, QUIRE_MODEL=str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "QUIRE_MODEL=" in done.stderr and "quire serve" in done.stderr and "Traceback" not in done.stderr


def test_worker_without_a_broker_points_at_the_embedded_mode(tmp_path):
    done = _quire("worker", "--queues", "gpu", cache=tmp_path)
    assert done.returncode == 2 and "QUIRE_BROKER_URL" in done.stderr
