"""The README's main command works end to end, and bad inputs come back as errors, not tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

import workers.tasks
from pipeline import cli
from pipeline.db import migrate
from pipeline.documents import layout
from pipeline.documents.assemble import load_schema
from pipeline.documents.overlay import colour_for
from pipeline.engine.engine import Engine
from pipeline.engine.model.loader import CheckpointError
from workers.celery_app import app


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


# --- settings and flags into the engine and the workers, in this process (the engine and Celery replaced) ---------


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """monkeypatch, with no QUIRE_* variable but the cache directory, and no .env file."""
    for key in [key for key in os.environ if key.startswith("QUIRE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("QUIRE_CACHE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def engine_keywords(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """What Engine.from_pretrained is called with, filled in when a command calls it (it then refuses to load)."""
    seen: dict[str, object] = {}

    def refuse(model: str, **kwargs: object) -> Engine:
        seen.update(kwargs)
        raise CheckpointError("not loaded in this test")

    monkeypatch.setattr(Engine, "from_pretrained", refuse)
    return seen


def test_engine_serve_flags_win_over_the_settings_and_the_rest_come_from_them(env: pytest.MonkeyPatch):
    for key, value in {"QUIRE_DEVICE": "cuda", "QUIRE_DTYPE": "float16", "QUIRE_MAX_NUM_SEQS": "64",
                       "QUIRE_KV_CACHE_FRACTION": "0.5", "QUIRE_CUDA_GRAPHS": "0"}.items():
        env.setenv(key, value)
    seen = engine_keywords(env)
    assert cli.main(["engine", "serve", "--model", "m", "--device", "cpu", "--dtype", "float32",
                     "--max-num-seqs", "4"]) == 2
    assert seen == {"device": "cpu", "dtype": "float32", "max_num_seqs": 4, "max_num_batched_tokens": None,
                    "kv_cache_memory": None, "gpu_memory_fraction": 0.5, "cuda_graphs": False}


@pytest.mark.parametrize(("layout_device", "expected"), [("", "cpu"), ("meta", "meta")])
def test_process_device_flag_moves_the_engine_and_the_layout_unless_a_layout_device_is_set(
    env: pytest.MonkeyPatch, tmp_path: Path, layout_device: str, expected: str
):
    env.setenv("QUIRE_DEVICE", "cuda")
    env.setenv("QUIRE_LAYOUT_DEVICE", layout_device)
    seen = engine_keywords(env)
    layouts: list[str] = []
    env.setattr(layout, "layout_backend", lambda name, model, device: layouts.append(device) or layout.PageLayout())
    assert cli.main(["process", str(CORPUS / "minimal-document.pdf"), "-o", str(tmp_path / "out"), "--model", "m",
                     "--device", "cpu"]) == 2
    assert (seen["device"], layouts) == ("cpu", [expected])


class PreloadSeen:
    """workers.tasks.context() stand-in that records whether the layout was preloaded."""

    def __init__(self) -> None:
        self.preloaded = False

    def preload_layout(self) -> None:
        self.preloaded = True


def start_worker(env: pytest.MonkeyPatch, *arguments: str) -> tuple[list[str], PreloadSeen]:
    """`quire worker ARGUMENTS` up to Celery's start: (Celery's argv, the context it preloaded the layout into)."""
    env.setenv("QUIRE_BROKER_URL", "redis://127.0.0.1:6379/0")
    argv: list[str] = []
    context = PreloadSeen()
    env.setattr(migrate, "upgrade_to_head", lambda url: None)
    env.setattr(cli, "configure_logging", lambda *args: None)
    env.setattr(app, "worker_main", argv.extend)
    env.setattr(workers.tasks, "context", lambda: context)
    assert cli.main(["worker", *arguments]) == 0
    return argv, context


@pytest.mark.parametrize(("variables", "arguments", "concurrency"), [
    ({"QUIRE_DEVICE": "cpu"}, [], "8"),
    ({"QUIRE_DEVICE": "cuda"}, [], "64"),  # 256 sequences on CUDA
    ({"QUIRE_DEVICE": "cuda", "QUIRE_MAX_NUM_SEQS": "128"}, [], "32"),
    ({"QUIRE_DEVICE": "cuda", "QUIRE_GPU_THREADS": "3"}, [], "3"),
    ({"QUIRE_DEVICE": "cuda"}, ["--concurrency", "5"], "5"),
])
def test_a_gpu_worker_takes_as_many_pages_at_once_as_fill_the_engines_batch(
    env: pytest.MonkeyPatch, variables: dict[str, str], arguments: list[str], concurrency: str
):
    for key, value in variables.items():
        env.setenv(key, value)
    argv, _ = start_worker(env, "--queues", "gpu", *arguments)
    assert argv[argv.index("--pool") + 1] == "threads"
    assert argv[argv.index("--concurrency") + 1] == concurrency


def test_a_cpu_worker_leaves_its_concurrency_to_celery(env: pytest.MonkeyPatch):
    argv, context = start_worker(env, "--queues", "cpu")
    assert argv[argv.index("--pool") + 1] == "prefork" and "--concurrency" not in argv
    assert not context.preloaded


@pytest.mark.parametrize(("queues", "prepare_queue", "preloaded"), [
    ("gpu", "cpu", False), ("gpu", "gpu", True), ("cpu,gpu", "cpu", True),
])
def test_a_gpu_worker_that_prepares_pages_loads_its_layout_model_before_the_engine(
    env: pytest.MonkeyPatch, queues: str, prepare_queue: str, preloaded: bool
):
    env.setenv("QUIRE_PREPARE_QUEUE", prepare_queue)
    _, context = start_worker(env, "--queues", queues)
    assert context.preloaded is preloaded


def test_the_embedded_service_loads_the_layout_model_before_the_engine():
    loaded: list[str] = []

    class Host:
        @property
        def engine(self) -> None:
            loaded.append("engine")

    workers = SimpleNamespace(context=SimpleNamespace(preload_layout=lambda: loaded.append("layout")))
    assert cli._load_models(workers, Host()) is True
    assert loaded == ["layout", "engine"]
