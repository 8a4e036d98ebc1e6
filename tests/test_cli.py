"""The README's main command works end to end, and bad inputs come back as errors, not tracebacks."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

import workers.tasks
from pipeline import cli, documents_api
from pipeline.cli import service_commands
from pipeline.cli.process_command import Console
from pipeline.cli.service_commands import load_models
from pipeline.config import get_settings
from pipeline.db import migrate
from pipeline.documents.assemble import load_schema
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.overlay import colour_for
from pipeline.engine.engine import Engine
from pipeline.engine.model.loader import CheckpointError
from tests.commands import quire_here
from workers.celery_app import app

pytestmark = pytest.mark.slow  # each test runs `quire` as a subprocess


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path):
    """`quire ARGS` in this process (tests/commands.py), its pages in this thread as in `_quire`."""
    return functools.partial(quire_here, monkeypatch, capsys, cache=tmp_path, QUIRE_PROCESS_WORKERS="0")


def _quire(*args: str, cache: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """`quire ARGS` in a subprocess; its pages in its own thread unless QUIRE_PROCESS_WORKERS is given (the page
    workers' start is a second of each command's; tests/documents/test_page_pool.py and the test of input order
    run them)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUIRE_")}
    env.update(QUIRE_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1", QUIRE_PROCESS_WORKERS="0")
    env.update(env_vars)
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_demo_turns_a_sample_pdf_into_markdown_and_overlays_and_says_the_tiny_models_regions_are_noise(tmp_path):
    done = _quire("demo", "--max-tokens", "8", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "demo" / "out"
    assert "sample.pdf: 2 pages, succeeded; layout pdf (no layout weights)" in done.stdout
    assert "# A sample report" in done.stdout and f"{out / 'sample.md'}, its first" in done.stdout
    assert str(out / "sample.pages" / "page-0002.overlay.png") in done.stdout
    assert "RANDOM checkpoint" in done.stdout and "quire models pull" in done.stdout
    result = json.loads((out / "sample.json").read_text())
    jsonschema.validate(result, load_schema())
    labels = {region["label"]: region["source"] for page in result["pages"] for region in page["regions"]}
    assert (labels["table"], labels["display_formula"], labels["doc_title"]) == ("model", "model", "text-layer")
    assert labels["image"] == "none" and (tmp_path / "tiny-checkpoint" / "model.safetensors").exists()
    assert "Unrecognized keys" not in done.stderr  # writing and loading the model built no transformers config


def test_demo_uses_the_model_when_it_is_on_this_machine_and_calls_nothing_noise(tmp_path, here, tiny_checkpoint):
    done = here("demo", "--max-tokens", "4", cache=tmp_path, QUIRE_MODEL=str(tiny_checkpoint))
    assert done.returncode == 0, done.stderr
    assert f"model {tiny_checkpoint}@" in done.stdout and "RANDOM" not in done.stdout
    assert not (tmp_path / "tiny-checkpoint").exists()


def test_recognize_refuses_a_pdf_and_a_non_image_by_code_and_points_at_process(tmp_path, tiny_checkpoint):
    bad, pdf = tmp_path / "bad.png", CORPUS / "minimal-document.pdf"
    bad.write_bytes(b"not an image at all")
    done = _quire("recognize", str(bad), str(pdf), "--model", str(tiny_checkpoint), cache=tmp_path)
    assert done.returncode == 1, done.stderr
    assert [json.loads(line)["error"] for line in done.stdout.splitlines()] == ["undecodable", "not_an_image"]
    assert f"error: {pdf}: a PDF document, not an image" in done.stderr and f"`quire process {pdf}`" in done.stderr
    assert f"`quire process {bad}`" in done.stderr and "BytesIO" not in done.stderr + done.stdout
    assert "Unrecognized keys" not in done.stderr  # the engine loaded without transformers' rope warning


def _without(tiny_checkpoint: Path, directory: Path, name: str) -> Path:
    shutil.copytree(tiny_checkpoint, directory)
    (directory / name).unlink()
    return directory


@pytest.mark.parametrize("name", ["config.json", "chat_template.jinja", "tokenizer.json"])
def test_a_checkpoint_missing_a_file_is_one_message_naming_it_and_exit_2(tmp_path, here, tiny_checkpoint, name):
    model = _without(tiny_checkpoint, tmp_path / "model", name)
    done = here("recognize", str(tmp_path / "x.png"), "--model", str(model), cache=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [message] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert str(model / name) in message and "quire models pull" in message


@pytest.mark.parametrize("model", ["./no-such-dir", "PaddlePaddle/not-downloaded-here"])
def test_an_unavailable_model_says_how_to_get_one(tmp_path, here, model):
    image = tmp_path / "x.png"
    image.write_bytes(b"")
    done = here("recognize", str(image), "--model", model, cache=tmp_path)
    assert done.returncode == 2
    assert "quire demo" in done.stderr and "Traceback" not in done.stderr


# --- quire process --------------------------------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
FAST = ("--layout", "pdf", "--dpi", "40", "--text-layer", "off", "--max-tokens", "4")


def test_process_writes_markdown_json_and_page_images_with_overlays(tmp_path, here, tiny_checkpoint):
    from PIL import Image

    out = tmp_path / "out"
    done = here("process", str(CORPUS / "pdflatex-4-pages.pdf"), "-o", str(out), "--model", str(tiny_checkpoint),
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
    assert result["files"]["markdown"] == "pdflatex-4-pages.md" and result["files"]["json"] == "pdflatex-4-pages.json"
    assert [(p["page"], p["overlay"]) for p in result["files"]["pages"]] == [
        (i, f"pdflatex-4-pages.pages/page-000{i}.overlay.png") for i in range(1, 5)]
    page, overlay = Image.open(pages / "page-0001.png"), Image.open(pages / "page-0001.overlay.png")
    assert page.size == overlay.size == (result["pages"][0]["width_px"], result["pages"][0]["height_px"])
    x0, y0, x1, y1 = result["pages"][0]["regions"][0]["bbox_px"]
    assert overlay.getpixel((int(x0) - 1, int((y0 + y1) / 2))) == colour_for("text")  # just left of the text box


def test_process_takes_a_directory_skips_finished_inputs_and_reports_bad_ones(tmp_path, here, tiny_checkpoint):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    (inbox / "letter.pdf").write_bytes((CORPUS / "minimal-document.pdf").read_bytes())
    (inbox / "notes.txt").write_text("not a document: not picked from a directory")
    bad = tmp_path / "report.pdf"
    bad.write_text("<!doctype html><p>an HTML page saved as .pdf</p>")
    args = ("process", str(inbox), str(bad), "-o", str(out), "--model", str(tiny_checkpoint), *FAST)

    first = here(*args, cache=tmp_path)
    assert first.returncode == 1, first.stderr  # one input failed
    assert f"{inbox}: 1 other file left alone: notes.txt" in first.stderr.splitlines()
    assert sorted(p.name for p in out.iterdir()) == ["letter.json", "letter.md", "letter.pages", "report.json"]
    failed = json.loads((out / "report.json").read_text())
    assert (failed["status"], failed["error"]["code"]) == ("failed", "unsupported_format")
    jsonschema.validate(failed, load_schema())

    again = here(*args, cache=tmp_path)
    assert again.returncode == 1 and again.stderr.count("skip ") == 1  # the named report.pdf is done again
    assert f"skip {inbox / 'letter.pdf'}" in again.stderr

    (out / "letter.pages" / "stale.png").write_bytes(b"")
    forced = here(*args, "--force", cache=tmp_path)
    assert forced.returncode == 1 and "skip " not in forced.stderr
    assert not (out / "letter.pages" / "stale.png").exists()


def test_process_writes_each_file_and_reports_the_files_in_the_order_given(tmp_path, tiny_checkpoint):
    files = ["pdflatex-4-pages.pdf", "minimal-document.pdf", "multicolumn.pdf"]
    done = _quire("process", *(str(CORPUS / name) for name in files), "-o", str(tmp_path / "out"),
                  "--model", str(tiny_checkpoint), *FAST, cache=tmp_path, QUIRE_PROCESS_WORKERS="2")
    assert done.returncode == 0, done.stderr
    reports = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith("[")]
    assert [line.split(":")[0] for line in reports] == [f"[{n}/3] {name}" for n, name in enumerate(files, 1)]
    assert all((tmp_path / "out" / f"{Path(name).stem}.json").exists() for name in files)


def test_the_console_holds_a_file_s_line_until_the_files_before_it_are_reported(capsys):
    console = Console(["a.pdf", "b.pdf", "c.pdf"])
    console.done(2, "1 page, succeeded", 1500.0)
    console.done(1, "2 pages, succeeded", 500.0)
    assert capsys.readouterr().err == ""
    console.done(0, "4 pages, succeeded", None)
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    assert lines[0].startswith("[1/3] a.pdf: 4 pages, succeeded (")
    assert lines[1:] == ["[2/3] b.pdf: 2 pages, succeeded (0.5s)", "[3/3] c.pdf: 1 page, succeeded (1.5s)"]


def test_process_without_the_weights_skips_the_regions_that_need_them_and_says_how_to_get_them(tmp_path, here):
    done = here("process", str(CORPUS / "grayscale-image.pdf"), "-o", str(tmp_path / "out"),
                "--model", "PaddlePaddle/not-downloaded-here", cache=tmp_path)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "1 page, partial; layout page (no layout weights, no text layer); 1 region skipped (model_unavailable)" \
        in done.stderr  # a scan read without a model has no text: not `succeeded`
    result = json.loads((tmp_path / "out" / "grayscale-image.json").read_text())
    assert (result["status"], result["model_error"]["code"]) == ("partial", "model_unavailable")
    assert "PaddlePaddle/not-downloaded-here" in result["model_error"]["message"]
    assert "quire models pull" in done.stderr and "quire demo" in done.stderr
    assert f"--model {tmp_path / 'tiny-checkpoint'}" in done.stderr


def test_process_without_the_layout_model_says_how_to_get_it_and_names_the_model_free_layouts(tmp_path, here):
    done = here("process", str(CORPUS / "minimal-document.pdf"), "-o", str(tmp_path / "out"),
                "--layout", "pp-doclayout", "--layout-model", str(tmp_path / "no-layout-model"), cache=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--layout pdf" in done.stderr and not (tmp_path / "out").exists()


# --- quire serve / quire worker ----------------------------------------------------------------------------------


def test_serve_without_the_weights_says_how_to_try_the_demo_checkpoint(tmp_path):
    done = _quire("serve", "--port", "0", cache=tmp_path, QUIRE_MODEL=str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "QUIRE_MODEL=" in done.stderr and "quire serve" in done.stderr and "Traceback" not in done.stderr


def test_serve_takes_the_model_from_its_flag(tmp_path):
    done = _quire("serve", "--port", "0", "--model", str(tmp_path / "flagged"), cache=tmp_path)
    assert done.returncode == 2 and f"{tmp_path / 'flagged'}: not a checkpoint directory" in done.stderr


def test_version_is_the_installed_package_version(capsys):
    with pytest.raises(SystemExit) as exit_status:
        cli.main(["--version"])
    assert exit_status.value.code == 0 and capsys.readouterr().out == f"quire {version('quire')}\n"


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["process", "x.pdf"], ["recognize", "x.png"],
                                     ["engine", "serve"]])
def test_every_command_that_loads_a_model_takes_model_and_quantization(command: list[str]):
    args = cli.build_parser().parse_args([*command, "--model", "DIR", "--quantization", "int4"])
    assert (args.model, args.quantization) == ("DIR", "int4")


MISSING_DATABASE = "postgresql+psycopg://postgres@127.0.0.1:5432/quire_no_such_database"


def test_migrate_against_a_database_that_does_not_exist_says_how_to_create_it(tmp_path):
    done = _quire("migrate", cache=tmp_path, QUIRE_DATABASE_URL=MISSING_DATABASE)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f'error: {MISSING_DATABASE}: database "quire_no_such_database" does not exist. Create it (`createdb -h '
        "127.0.0.1 -p 5432 -U postgres quire_no_such_database`) or set QUIRE_DATABASE_URL to one that exists, then "
        "run `quire migrate`."]


def test_distributed_serve_against_a_missing_database_logs_one_line_with_its_code(tmp_path):
    done = _quire("serve", "--port", "0", cache=tmp_path, QUIRE_DATABASE_URL=MISSING_DATABASE,
                  QUIRE_BROKER_URL="redis://127.0.0.1:6379/0")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [logged] = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert logged["code"] == "database_missing" and "createdb" in logged["message"]


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
                       "QUIRE_KV_CACHE_FRACTION": "0.5", "QUIRE_PREFIX_CACHE_TOKENS": "8192",
                       "QUIRE_CUDA_GRAPHS": "0", "QUIRE_ONEDNN_CACHE_ENTRIES": "64"}.items():
        env.setenv(key, value)
    seen = engine_keywords(env)
    assert cli.main(["engine", "serve", "--model", "m", "--device", "cpu", "--dtype", "float32",
                     "--max-num-seqs", "4", "--quantization", "int8"]) == 2
    assert seen == {"device": "cpu", "dtype": "float32", "max_num_seqs": 4, "max_num_batched_tokens": None,
                    "kv_cache_memory": None, "gpu_memory_fraction": 0.5, "prefix_cache_tokens": 8192,
                    "onednn_cache_entries": 64, "cuda_graphs": False, "quantization": "int8", "group_size": None}


@pytest.mark.parametrize(("layout_device", "expected"), [("", "cpu"), ("meta", "meta")])
def test_process_device_flag_moves_the_engine_and_the_layout_unless_a_layout_device_is_set(
    env: pytest.MonkeyPatch, tmp_path: Path, layout_device: str, expected: str
):
    env.setenv("QUIRE_DEVICE", "cuda")
    env.setenv("QUIRE_LAYOUT_DEVICE", layout_device)
    seen = engine_keywords(env)
    layouts: list[str] = []
    env.setattr(documents_api, "layout_backend",
                lambda name, model, device: layouts.append(device) or PageLayout())
    assert cli.main(["process", str(CORPUS / "minimal-document.pdf"), "-o", str(tmp_path / "out"), "--model", "m",
                     "--device", "cpu", "--text-layer", "off"]) == 2  # loaded (lazily, for its one region): refused
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
    env.setattr(service_commands, "configure_logging", lambda *args: None)
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


def test_a_worker_model_flag_reaches_its_tasks_settings(env: pytest.MonkeyPatch):
    env.setenv("QUIRE_MODEL", "from-the-environment")  # restored after the test, as the flags overwrite them
    env.setenv("QUIRE_QUANTIZATION", "none")
    start_worker(env, "--queues", "gpu", "--model", "/models/flagged", "--quantization", "int8")
    assert (get_settings().model, get_settings().quantization) == ("/models/flagged", "int8")


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
        def load(self) -> None:
            loaded.append("engine")

    workers = SimpleNamespace(context=SimpleNamespace(preload_layout=lambda: loaded.append("layout")))
    load_models(workers, Host())
    assert loaded == ["layout", "engine"]


# --- quire process: what needs no model, what was chosen, which inputs and pages ----------------------------------


def test_a_pdf_whose_every_region_has_a_text_layer_is_processed_without_any_model(tmp_path, here):
    out = tmp_path / "out"
    done = here("process", str(CORPUS / "pdflatex-4-pages.pdf"), "-o", str(out), "--layout", "pdf",
                "--model", "PaddlePaddle/not-downloaded-here", cache=tmp_path)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    result = json.loads((out / "pdflatex-4-pages.json").read_text())
    assert {region["source"] for page in result["pages"] for region in page["regions"]} == {"text-layer"}
    assert result["model_revision"] is None


def test_model_none_skips_the_regions_that_need_the_model_says_so_and_exits_3(tmp_path, here):
    from pipeline.documents.sample_pdf import write_sample_pdf

    sample, out = write_sample_pdf(tmp_path / "sample.pdf"), tmp_path / "out"
    done = here("process", str(sample), "-o", str(out), "--model", "none", cache=tmp_path,
                QUIRE_LAYOUT_MODEL=str(tmp_path / "no-layout-weights"))
    assert done.returncode == 3, done.stderr
    assert (f"sample.pdf: 2 pages, partial; layout pdf (no layout weights); 2 regions skipped (model_none) → "
            f"{out / 'sample.md'}, {out / 'sample.json'}, {out / 'sample.pages'}/") in done.stderr
    result = json.loads((out / "sample.json").read_text())
    jsonschema.validate(result, load_schema())
    skipped = [r for page in result["pages"] for r in page["regions"] if r["status"] == "skipped"]
    assert [(r["label"], r["error"]["code"]) for r in skipped] == [("table", "model_none"),
                                                                  ("display_formula", "model_none")]
    assert result["model_error"]["code"] == "model_none" and "model none" in result["model_error"]["message"]
    markdown = (out / "sample.md").read_text()
    assert markdown.startswith("# A sample report") and "<table" not in markdown and "$$" not in markdown
    assert result["model"] is None and result["pages"][0]["layout_reason"] == "no layout weights"


def process_here(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    """`quire process ARGUMENTS --layout pdf --model none` in this process: (exit status, stderr)."""
    status = cli.main(["process", *arguments, "--layout", "pdf", "--model", "none"])
    return status, capsys.readouterr().err


def test_a_file_named_on_the_command_line_is_processed_again_though_its_json_exists(env, tmp_path, capsys):
    arguments = (str(CORPUS / "minimal-document.pdf"), "-o", str(tmp_path / "out"))
    assert process_here(capsys, *arguments)[0] == 0
    (tmp_path / "out" / "minimal-document.json").write_text("{}")
    status, err = process_here(capsys, *arguments)
    assert status == 0 and "skip" not in err and "minimal-document.pdf: 1 page, succeeded" in err
    assert json.loads((tmp_path / "out" / "minimal-document.json").read_text())["status"] == "succeeded"


def test_a_recursive_scan_processes_the_folders_below_keeping_their_place_in_the_output(env, tmp_path, capsys):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    (inbox / "2024").mkdir(parents=True)
    for path in (inbox / "letter.pdf", inbox / "2024" / "letter.pdf"):
        path.write_bytes((CORPUS / "minimal-document.pdf").read_bytes())
    assert process_here(capsys, str(inbox), "-o", str(out))[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["letter.json", "letter.md", "letter.pages"]
    assert process_here(capsys, str(inbox), "-o", str(out), "-r")[0] == 0
    assert (out / "2024" / "letter.json").exists() and (out / "2024" / "letter.pages" / "page-0001.png").exists()


def test_pages_processes_only_the_pages_asked_for(env, tmp_path, capsys):
    status, err = process_here(capsys, str(CORPUS / "pdflatex-4-pages.pdf"), "-o", str(tmp_path), "--pages", "2-3")
    assert status == 0 and "pdflatex-4-pages.pdf: 2 pages, succeeded" in err
    result = json.loads((tmp_path / "pdflatex-4-pages.json").read_text())
    assert [page["index"] for page in result["pages"]] == [1, 2]


def test_quire_max_pages_fails_a_longer_document_with_the_services_error_code(env, tmp_path, capsys):
    from pipeline.documents.errors import DocumentError
    from pipeline.documents.sample_pdf import write_sample_pdf
    from pipeline.documents.source import ingest
    from pipeline.jobs.options import DocumentOptions

    env.setenv("QUIRE_MAX_PAGES", "1")
    sample = write_sample_pdf(tmp_path / "sample.pdf")  # two pages
    status, _ = process_here(capsys, str(sample), "-o", str(tmp_path / "out"))
    failed = json.loads((tmp_path / "out" / "sample.json").read_text())
    assert status == 1 and (failed["status"], failed["error"]["code"]) == ("failed", "too_many_pages")
    settings = get_settings()
    with pytest.raises(DocumentError) as refused:  # the service's stages, under the same settings
        ingest(sample.read_bytes(), DocumentOptions().resolved(settings).for_pipeline(settings).limits)
    assert refused.value.code == "too_many_pages"


def test_a_bad_page_range_is_refused_before_any_file_is_opened(env, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        process_here(capsys, str(CORPUS / "pdflatex-4-pages.pdf"), "-o", str(tmp_path / "out"), "--pages", "5-2")
    assert refused.value.code == 2 and "'5-2': pages count from 1 and a range runs from low to high" in \
        capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_broken_model_is_an_error_though_the_text_layers_regions_are_still_written(tmp_path, here):
    broken, out = tmp_path / "broken-model", tmp_path / "out"
    broken.mkdir()
    done = here("process", str(CORPUS / "grayscale-image.pdf"), "-o", str(out), "--model", str(broken),
                cache=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and str(broken) in done.stderr
    [region] = json.loads((out / "grayscale-image.json").read_text())["pages"][0]["regions"]
    assert region["status"] == "skipped" and region["error"]["code"] not in ("model_none", "model_unavailable")


# --- mistakes on the command line: one clear line, the documented exit status, never a traceback -----------------


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's one line that says what went wrong, after checking there is no traceback and only one."""
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith(("error:", "quire process: error:"))]
    return line


def _a_file(tmp_path: Path) -> Path:
    (tmp_path / "taken").write_text("a file where the output directory would go")
    return tmp_path / "taken"


def _an_empty_directory(tmp_path: Path) -> Path:
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def _a_directory_of_other_files(tmp_path: Path) -> Path:
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "notes.txt").write_text("not a document")
    (tmp_path / "inbox" / "sheet.xlsx").write_bytes(b"PK\x03\x04 not a document either")
    return tmp_path / "inbox"


PDF = str(CORPUS / "minimal-document.pdf")
MISTAKES = {  # what the command line says: (its arguments in tmp, its exit status, its one line of error)
    "output is a file": (lambda tmp: ["process", PDF, "-o", str(_a_file(tmp))], 2,
                         "argument -o/--output: {tmp}/taken exists and is not a directory"),
    "dpi 0": (lambda tmp: ["process", PDF, "-o", str(tmp), "--dpi", "0"], 2,
              "argument --dpi: 0 is out of range: 18 to 600"),
    "dpi 5000": (lambda tmp: ["process", PDF, "-o", str(tmp), "--dpi", "5000"], 2,
                 "argument --dpi: 5000 is out of range: 18 to 600"),
    "empty directory": (lambda tmp: ["process", str(_an_empty_directory(tmp)), "-o", str(tmp)], 1,
                        "error: {tmp}/empty: no PDF, TIFF, PNG, JPEG or WebP file in it"),
    "directory of other files": (lambda tmp: ["process", str(_a_directory_of_other_files(tmp)), "-o", str(tmp)], 1,
                                 "error: {tmp}/inbox: no PDF, TIFF, PNG, JPEG or WebP file in it (2 other files "
                                 "left alone: notes.txt, sheet.xlsx)"),
    "model path that does not exist": (
        lambda tmp: ["process", PDF, "-o", str(tmp), "--model", f"{tmp}/no-such-model"], 2,
        "error: {tmp}/no-such-model: not a checkpoint directory."),
    "models list of a directory that does not exist": (
        lambda tmp: ["models", "list", "--dir", f"{tmp}/nowhere"], 2, "error: {tmp}/nowhere: no such directory"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_on_the_command_line_is_one_line_and_its_exit_status(tmp_path, mistake):
    arguments, status, message = MISTAKES[mistake]
    done = _quire(*arguments(tmp_path), cache=tmp_path)
    assert done.returncode == status, done.stderr
    assert message.format(tmp=tmp_path) in _error_line(done)
