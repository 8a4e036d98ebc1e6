"""A GPU worker whose model does not load, as an operator first meets it: `quire serve` and `quire worker --queues
gpu` on a checkpoint without its weights. /readyz names the model's stable code before anything is uploaded, the
worker keeps running, and a worker that stops takes its verdict with it.

The worker's verdict would make the session's shared distributed service unready, so these processes run on a
Redis of their own (tests/fault/owned.py) and a scratch Postgres database."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline import process
from tests.fault.owned import OwnedRedis
from tests.jobs.expected import CORPUS, comparable
from tests.local_stack import free_port, scratch_database
from tests.service.conftest import Service, quire_env, start, stop, wait_for_health, wait_for_workers
from tests.service.test_documents import result, upload, wait_until_final


def readyz_until(service: Service, status_code: int, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(f"{service.url}/readyz", timeout=10)
        if response.status_code == status_code:
            return response.json()
        time.sleep(0.2)
    raise AssertionError(f"/readyz is not {status_code} after {timeout_s} s: {response.json()}\n{service.tail()}")


@pytest.fixture
def without_weights(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    model = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, model)
    (model / "model.safetensors").unlink()
    return model


@pytest.fixture
def owned_redis(tmp_path: Path) -> Iterator[OwnedRedis]:
    owned = OwnedRedis(tmp_path)
    owned.start()
    yield owned
    owned.stop()


def test_readyz_names_a_gpu_workers_missing_weights_before_any_upload_and_the_worker_stays_up(
        without_weights: Path, owned_redis: OwnedRedis, tmp_path: Path):
    port, processes = free_port(), []
    with scratch_database("quire_model") as database_url:
        env = quire_env(tmp_path, without_weights, QUIRE_DATABASE_URL=database_url,
                        QUIRE_BROKER_URL=owned_redis.url, QUIRE_API_KEYS="off")
        service = Service(f"http://127.0.0.1:{port}", database_url, [tmp_path / "serve.log", tmp_path / "gpu.log"],
                          env)
        try:
            start(processes, service.logs[0], env, "serve", "--port", str(port))
            wait_for_health(service, processes)
            assert readyz_until(service, 200)["problems"] == []  # no GPU worker has reported yet
            worker = start(processes, service.logs[1], env, "worker", "--queues", "gpu", "--concurrency", "1")
            wait_for_workers(owned_redis.url, {"quire-gpu"}, service)
            [problem] = readyz_until(service, 503)["problems"]
            assert problem.startswith(f"model: no_weights: {without_weights}: no model.safetensors"), problem
            assert worker.poll() is None, service.tail()
            stop([worker])
            assert readyz_until(service, 200, timeout_s=10)["problems"] == []
        finally:
            stop(processes)


@pytest.mark.parametrize(("flags", "model", "code"), [
    (["--model", "none"], "PaddlePaddle/PaddleOCR-VL", "model_none"),
    ([], "PaddlePaddle/not-downloaded-here", "model_unavailable"),
])
def test_serve_without_a_model_is_up_says_so_at_readyz_and_skips_what_needs_one_as_quire_process_does(
        tmp_path: Path, flags: list[str], model: str, code: str):
    scan = (CORPUS / "grayscale-image.pdf").read_bytes()
    port, processes = free_port(), []
    env = quire_env(tmp_path, Path(model), QUIRE_API_KEYS="off", HF_HUB_OFFLINE="1")
    service = Service(f"http://127.0.0.1:{port}", f"sqlite:///{tmp_path / 'quire.db'}", [tmp_path / "serve.log"], env)
    try:
        start(processes, service.logs[0], env, "serve", "--port", str(port), *flags)
        wait_for_health(service, processes)
        ready = httpx.get(f"{service.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["notes"][0].startswith(f"model: {code}: "), ready.text
        document = upload(service, scan, "scan.pdf")
        status = wait_until_final(service, document["id"])
        served = result(service, document["id"], "json").json()
    finally:
        stop(processes)
    assert "Traceback" not in service.tail()
    expected = process(scan, name="scan.pdf", model="none" if flags else model, max_tokens=4, dpi=40, layout="pdf",
                       text_layer="off", cache_dir=tmp_path / "process").to_json()
    assert (status["status"], served["model_error"]["code"], expected["model_error"]["code"]) == ("partial", code, code)
    assert comparable(without_model_error(served)) == comparable(without_model_error(expected))


def without_model_error(result: dict) -> dict:
    """The result less model_error's message, which names what this process and the service each tried."""
    return {**result, "model_error": result["model_error"]["code"]}
