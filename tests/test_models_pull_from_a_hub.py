"""`quire models pull` downloads over HTTP the way it would from huggingface.co, and what it fetched is used.

huggingface.co cannot be reached from the test machines, so tests/hub_server.py stands in for it on loopback: the
hub's model info, tree listing and `resolve` (with LFS weights redirected to a separate storage server), serving
Quire's two default repositories with tiny checkpoints in the real format, plus a README.md and a .gitattributes that
a pull must not fetch. Every test runs the installed `quire` console script as a user would, with HF_ENDPOINT at the
stand-in and HF_HOME in tmp_path; nothing of huggingface_hub is replaced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config import Settings
from tests.hub_server import HubServer, hub_server, repo_contents

pytestmark = pytest.mark.slow  # `quire models pull` as a subprocess, against a local hub server

MODEL, LAYOUT = Settings.model_fields["model"].default, Settings.model_fields["layout_model"].default
QUIRE = Path(sys.executable).with_name("quire")
CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
NOT_CHECKPOINT_FILES = {"README.md": b"# A model card\n", ".gitattributes": b"*.safetensors filter=lfs diff=lfs\n"}


def quire(*args: str, hf_home: Path, hub: str, offline: bool = False) -> subprocess.CompletedProcess[str]:
    """`quire ARGS` as a user runs it, with huggingface_hub talking to `hub` and caching under `hf_home`."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("QUIRE_", "HF_", "TRANSFORMERS_OFFLINE"))}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT=hub, HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1",
               QUIRE_CACHE_DIR=str(hf_home.parent / "quire"), **({"HF_HUB_OFFLINE": "1"} if offline else {}))
    return subprocess.run([str(QUIRE), *args], env=env, capture_output=True, text=True, timeout=300, check=False)


def report(stdout: str) -> dict[str, tuple[str, list[str]]]:
    """A pull's output as model → (what follows `MODEL: `, the verdict of each check: `ok` or `FAIL`)."""
    models: dict[str, tuple[str, list[str]]] = {}
    for line in stdout.splitlines():
        if line.startswith("  "):
            models[next(reversed(models))][1].append(line.split()[0])
        else:
            model, _, rest = line.partition(": ")
            models[model] = (rest, [])
    return models


def snapshot(hf_home: Path, repo_id: str, commit: str) -> Path:
    return (hf_home / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit).resolve()


def checkpoint_files(contents: dict[str, bytes]) -> set[str]:
    return set(contents) - set(NOT_CHECKPOINT_FILES)


@pytest.fixture(scope="module")
def repos(tiny_checkpoint: Path, layout_checkpoint_factory) -> dict[str, dict[str, bytes]]:
    """Quire's two default repositories as a hub holds them: the checkpoint files and a model card beside them."""
    return {MODEL: {**repo_contents(tiny_checkpoint), **NOT_CHECKPOINT_FILES},
            LAYOUT: {**repo_contents(layout_checkpoint_factory()), **NOT_CHECKPOINT_FILES}}


@dataclass(frozen=True)
class Pulled:
    hf_home: Path
    hub: HubServer  # stopped: what follows the pull works without it
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def pulled(repos: dict[str, dict[str, bytes]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pulled]:
    """`quire models pull` on a connected machine, once for the module; the hub is gone afterwards, as it is for a
    user who pulled once and then works offline."""
    hf_home = tmp_path_factory.mktemp("pulled") / "hf"
    with hub_server(repos) as hub:
        done = quire("models", "pull", hf_home=hf_home, hub=hub.endpoint)
    yield Pulled(hf_home, hub, done)


def test_pull_downloads_both_default_models_over_http_and_every_check_passes(pulled, repos):
    assert pulled.done.returncode == 0, pulled.done.stderr
    commits = {repo_id: pulled.hub.commit(repo_id) for repo_id in (MODEL, LAYOUT)}
    assert report(pulled.done.stdout) == {
        MODEL: (f"{snapshot(pulled.hf_home, MODEL, commits[MODEL])} (revision {commits[MODEL]})", ["ok"] * 3),
        LAYOUT: (f"{snapshot(pulled.hf_home, LAYOUT, commits[LAYOUT])} (revision {commits[LAYOUT]})", ["ok"]),
    }
    for repo_id in (MODEL, LAYOUT):
        assert pulled.hub.downloaded(repo_id) == checkpoint_files(repos[repo_id])  # the model card stays behind
        assert {f"GET /api/models/{repo_id}/revision/main", f"GET /api/models/{repo_id}/tree/{commits[repo_id]}"} \
            <= {f"{method} {path}" for method, path in pulled.hub.requests}
    assert pulled.hub.refused == []  # the client asked nothing of the hub that the stand-in cannot answer


def test_weights_come_from_the_storage_the_hub_redirects_to_and_are_cached_under_their_sha256(pulled, repos):
    weights = pulled.hub.repos[MODEL].files["model.safetensors"]
    assert ("GET", f"/lfs/{weights.sha256}") in pulled.hub.requests
    cached = snapshot(pulled.hf_home, MODEL, pulled.hub.commit(MODEL)) / "model.safetensors"
    assert cached.resolve().name == weights.sha256 and cached.read_bytes() == repos[MODEL]["model.safetensors"]


def test_list_shows_the_pulled_models_at_the_commit_the_hub_announced(pulled):
    done = quire("models", "list", hf_home=pulled.hf_home, hub=pulled.hub.endpoint, offline=True)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [(row[0], row[1], row[-1]) for row in rows] == [
        (LAYOUT, pulled.hub.commit(LAYOUT)[:12], "ok"), (MODEL, pulled.hub.commit(MODEL)[:12], "ok")]


def test_pull_offline_with_the_hub_gone_checks_the_cached_copy_and_passes(pulled):
    done = quire("models", "pull", hf_home=pulled.hf_home, hub=pulled.hub.endpoint, offline=True)
    assert done.returncode == 0, done.stderr
    assert report(done.stdout) == report(pulled.done.stdout)
    assert f"HF_HUB_OFFLINE is set: checking the cached copy of {MODEL} only" in done.stderr


def test_process_after_the_pull_uses_the_pulled_model_offline_and_records_its_commit(pulled, tmp_path):
    out = tmp_path / "out"
    done = quire("process", str(CORPUS / "minimal-document.pdf"), "-o", str(out), "--model", MODEL,
                 "--layout", "pdf", "--dpi", "40", "--text-layer", "off", "--max-tokens", "4",
                 hf_home=pulled.hf_home, hub=pulled.hub.endpoint, offline=True)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "minimal-document.json").read_text())
    assert (result["status"], result["model"], result["model_revision"]) == (
        "succeeded", MODEL, pulled.hub.commit(MODEL))
    assert {region["source"] for page in result["pages"] for region in page["regions"]} == {"model"}


def test_pull_into_a_directory_puts_each_model_under_its_name_with_its_commit(repos, tmp_path):
    models = tmp_path / "models"
    with hub_server(repos) as hub:
        done = quire("models", "pull", "--dir", str(models), hf_home=tmp_path / "hf", hub=hub.endpoint)
    assert done.returncode == 0, done.stderr
    directories = {MODEL: models.resolve() / "PaddleOCR-VL", LAYOUT: models.resolve() / "PP-DocLayoutV2_safetensors"}
    assert report(done.stdout) == {
        MODEL: (f"{directories[MODEL]} (revision {hub.commit(MODEL)})", ["ok"] * 3),
        LAYOUT: (f"{directories[LAYOUT]} (revision {hub.commit(LAYOUT)})", ["ok"]),
    }
    for repo_id, directory in directories.items():
        assert {path.name for path in directory.iterdir() if path.is_file()} == checkpoint_files(repos[repo_id])
    assert not list((tmp_path / "hf").rglob("blobs"))  # no second copy in the cache (huggingface_hub notes refs/)


def test_weights_the_hub_serves_cut_short_download_cleanly_and_then_fail_the_check_naming_the_file(repos, tmp_path):
    weights = repos[MODEL]["model.safetensors"]
    cut = {**repos, MODEL: {**repos[MODEL], "model.safetensors": weights[: len(weights) // 2]}}
    with hub_server(cut) as hub:
        done = quire("models", "pull", hf_home=tmp_path / "hf", hub=hub.endpoint)
    assert hub.downloaded(MODEL) == checkpoint_files(repos[MODEL])  # sizes agree: the transfer itself succeeded
    assert done.returncode == 1, done.stderr
    assert report(done.stdout)[MODEL][1] == ["ok", "FAIL", "ok"] and report(done.stdout)[LAYOUT][1] == ["ok"]
    [failure] = [line for line in done.stdout.splitlines() if line.startswith("  FAIL")]
    cached = snapshot(tmp_path / "hf", MODEL, hub.commit(MODEL)) / "model.safetensors"
    assert failure.startswith(f"  FAIL weights: {cached}: unreadable safetensors file, truncated or corrupt")
