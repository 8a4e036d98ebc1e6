"""`quire models pull` fetches through huggingface_hub and checks what it got without loading the weights, one line
per check; `quire models list` shows what the Hugging Face cache (or a directory) holds. Each test runs the real
command on a real Hugging Face cache layout (refs/, blobs/, snapshots/<commit>/ of symlinks) built in tmp_path, with
HF_HOME and HF_HUB_CACHE pointing at it, and HF_HUB_OFFLINE=1 since this machine cannot reach the hub."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline import cli
from pipeline.engine.model import loader

pytestmark = pytest.mark.slow  # `quire models` as a subprocess

MODEL, LAYOUT = "PaddlePaddle/PaddleOCR-VL", "PaddlePaddle/PP-DocLayoutV2_safetensors"
COMMITS = {MODEL: "a" * 40, LAYOUT: "b" * 40, "google-bert/bert-base-uncased": "c" * 40}


def cache_snapshot(hub: Path, repo_id: str, source: Path) -> Path:
    """`source`'s files as huggingface_hub stores a download of `repo_id` at its main commit."""
    repo, commit = hub / f"models--{repo_id.replace('/', '--')}", COMMITS[repo_id]
    snapshot = repo / "snapshots" / commit
    for folder in (repo / "refs", repo / "blobs", snapshot):
        folder.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for file in (file for file in source.iterdir() if file.is_file()):
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


@pytest.fixture
def hf_home(tmp_path: Path) -> Path:
    return tmp_path / "hf"


@pytest.fixture
def cached(hf_home: Path, tiny_checkpoint: Path, layout_checkpoint_factory) -> Path:
    """A Hugging Face cache holding Quire's two default models (tiny, in the real format) and nothing else."""
    hub = hf_home / "hub"
    cache_snapshot(hub, MODEL, tiny_checkpoint)
    cache_snapshot(hub, LAYOUT, layout_checkpoint_factory())
    return hub


def quire(*args: str, hf_home: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("QUIRE_", "HF_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_CACHE=str(hf_home / "hub"), HF_HUB_OFFLINE="1",
               QUIRE_CACHE_DIR=str(hf_home.parent / "quire"), **env_vars)
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "models", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_pull_offline_checks_the_cached_default_models_one_line_per_check(cached, hf_home):
    done = quire("pull", hf_home=hf_home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{MODEL}: {cached / 'models--PaddlePaddle--PaddleOCR-VL' / 'snapshots' / COMMITS[MODEL]} " \
                       f"(revision {COMMITS[MODEL]})"
    assert [line.split()[0] for line in lines[1:4]] == ["ok"] * 3
    assert "config.json parses" in lines[1] and "tensors match the model's names and shapes" in lines[2]
    assert "tokenizer and chat template load" in lines[3]
    assert lines[4].startswith(f"{LAYOUT}: ") and lines[5].split()[:3] == ["ok", "config.json", "parses"]
    assert "HF_HUB_OFFLINE is set: checking the cached copy" in done.stderr


def test_pull_offline_without_the_model_says_it_is_not_cached_and_how_to_get_it(hf_home):
    done = quire("pull", hf_home=hf_home)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"error: {MODEL} is not in {hf_home / 'hub'} and HF_HUB_OFFLINE is set" in done.stderr
    assert "quire models pull" in done.stderr


def test_pull_names_a_wrongly_shaped_tensor_from_the_headers_alone(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    bad = shutil.copytree(tiny_checkpoint, tmp_path / "bad")
    tensors = load_file(bad / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"][:3]
    save_file(tensors, str(bad / "model.safetensors"))

    def no_reading(*_: object) -> None:
        raise AssertionError("a check read tensor data")

    monkeypatch.setattr(loader, "_tensors", no_reading)
    assert cli.main(["models", "pull", str(bad), "--layout-model", str(tiny_checkpoint)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{bad}: {bad} (revision local)"
    assert lines[2] == "  FAIL weights: model.safetensors: tensor model.norm.weight has shape (3,), expected (64,)"
    assert lines[1].startswith("  ok ") and lines[3].startswith("  ok ")


def test_pull_into_a_directory_asks_huggingface_hub_for_the_checkpoint_files_only(
    tmp_path, tiny_checkpoint, layout_checkpoint_factory, monkeypatch, capsys
):
    """snapshot_download stands in for the network here; the test is about where the files go and what is asked."""
    asked = []
    sources = {MODEL: tiny_checkpoint, LAYOUT: layout_checkpoint_factory()}

    def download(repo_id: str, allow_patterns: list[str], local_dir: Path) -> str:
        asked.append((repo_id, allow_patterns, local_dir))
        shutil.copytree(sources[repo_id], local_dir)
        return str(local_dir)

    monkeypatch.setattr("huggingface_hub.snapshot_download", download)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    assert cli.main(["models", "pull", MODEL, "--layout-model", LAYOUT, "--dir", str(tmp_path / "models")]) == 0
    assert [(repo, local_dir.name) for repo, _, local_dir in asked] == [
        (MODEL, "PaddleOCR-VL"), (LAYOUT, "PP-DocLayoutV2_safetensors")]
    assert "*.safetensors" in asked[0][1] and "tokenizer*" in asked[0][1]
    assert capsys.readouterr().out.count("  ok ") == 4

    assert cli.main(["models", "list", "--dir", str(tmp_path / "models")]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [(row[0], row[1], row[-1]) for row in rows] == [("PP-DocLayoutV2_safetensors", "local", "ok"),
                                                           ("PaddleOCR-VL", "local", "ok")]


def test_list_shows_each_cached_model_with_its_commit_size_and_whether_it_checks(cached, hf_home, tmp_path):
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "bert"}')
    cache_snapshot(cached, "google-bert/bert-base-uncased", other)
    done = quire("list", hf_home=hf_home)
    assert done.returncode == 0, done.stderr
    rows = [line.split(None, 5) for line in done.stdout.splitlines()]
    assert [row[:2] for row in rows] == [[LAYOUT, "b" * 12], [MODEL, "a" * 12], ["google-bert/bert-base-uncased",
                                                                                 "c" * 12]]
    assert [row[-1] for row in rows[:2]] == ["ok", "ok"]
    assert "not a PaddleOCR-VL or PP-DocLayout checkpoint" in rows[2][-1]
    size = sum(file.stat().st_size for file in (cached / "models--PaddlePaddle--PaddleOCR-VL" / "blobs").iterdir())
    assert rows[1][2:4] == [f"{size / 1e9:.2f}", "GB"]


def test_list_of_an_empty_cache_says_so_in_one_whole_sentence_naming_pull_and_the_demo(hf_home):
    done = quire("list", hf_home=hf_home)
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"no models in {hf_home / 'hub'}: `quire models pull` fetches PaddlePaddle/PaddleOCR-VL and "
        "PaddlePaddle/PP-DocLayoutV2_safetensors, `quire demo` writes a tiny random checkpoint"]


def test_list_shows_the_demos_tiny_checkpoint_beside_the_cache(hf_home, tiny_checkpoint):
    tiny = hf_home.parent / "quire" / "tiny-checkpoint"
    shutil.copytree(tiny_checkpoint, tiny)
    done = quire("list", hf_home=hf_home)
    assert done.returncode == 0, done.stderr
    [row] = [line.split() for line in done.stdout.splitlines()]
    assert (row[0], row[1], row[-1]) == (str(tiny), "local", "ok")


def test_quantize_writes_a_checkpoint_that_checks_and_lists_as_ok(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "models" / "PaddleOCR-VL-int4"
    assert cli.main(["models", "quantize", str(tiny_checkpoint), str(out), "--quantization", "int4",
                     "--group-size", "32"]) == 0
    assert capsys.readouterr().out == f"{out}: int4 (group size 32) copy of {tiny_checkpoint}\n"
    stored = load_file(out / "model.safetensors")
    assert stored["lm_head.qweight"].dtype == torch.uint8 and "lm_head.weight" not in stored
    assert stored["model.embed_tokens.weight"].dtype == stored["visual.vision_model.post_layernorm.weight"].dtype
    assert not any("packing_position_embedding" in key for key in stored)
    assert cli.main(["models", "list", "--dir", str(tmp_path / "models")]) == 0
    assert capsys.readouterr().out.split()[-1] == "ok"


def test_quantize_refuses_a_bad_group_size_or_a_used_directory_and_writes_nothing(tiny_checkpoint, tmp_path,
                                                                                  capsys):
    out = tmp_path / "out"
    assert cli.main(["models", "quantize", str(tiny_checkpoint), str(out), "--quantization", "int4",
                     "--group-size", "128"]) == 1
    assert "model.layers.0.self_attn.q_proj: input width 64 is not a multiple of the int4 group size 128; " \
           "valid group sizes for it: 32, 64" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["models", "quantize", str(tiny_checkpoint), str(out), "--quantization", "int8"]) == 1
    assert "exists and is not empty" in capsys.readouterr().err
    assert [file.name for file in out.iterdir()] == ["notes.txt"]
