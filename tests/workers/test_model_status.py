"""A GPU worker knows whether its model loads before the first region: EngineHost.check reads the checkpoint's
config, safetensors headers and tokenizer without loading the weights, and agrees with a real load on the stable
code; a load's outcome replaces the check's; ModelStatusReporter keeps the verdict on the real Redis under a key
that expires unless refreshed and goes when the worker stops."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from pipeline.engine.model.errors import CheckpointError
from pipeline.jobs.model_status import ModelStatus
from tests.workers.checkpoints import (
    REDIS,
    broken_checkpoint,
    host_on,
    own_prefix,
    remove_directory,
    remove_weights,
    status_reader,
    truncate_weights,
)
from workers.tasks import ModelStatusReporter


@pytest.mark.parametrize(("breaks", "code", "verdict"), [
    (remove_weights, "no_weights", "problem"), (truncate_weights, "corrupt_weights", "problem"),
    (remove_directory, "model_unavailable", "note"),  # no model here: /readyz notes it, the service is up
])
def test_the_check_finds_a_broken_checkpoint_without_loading_it_and_a_load_agrees(tiny_checkpoint, tmp_path, breaks,
                                                                                    code, verdict):
    host = host_on(broken_checkpoint(tiny_checkpoint, tmp_path, breaks), tmp_path)
    checked = host.check()
    assert (checked.code, host.stats()) == (code, None)  # no engine was loaded for the verdict
    with pytest.raises(CheckpointError) as loading:
        host.engine  # noqa: B018 - a property that loads it
    assert (loading.value.code, str(loading.value)) == (checked.code, checked.message)
    said = {"problem": checked.problem, "note": checked.note}
    assert host.status == checked and said.pop(verdict).startswith(f"model: {code}: {checked.message}")
    assert said.popitem()[1] is None


def test_a_sound_checkpoint_passes_the_check_before_any_engine_loads(tiny_checkpoint, tmp_path):
    host = host_on(tiny_checkpoint, tmp_path)
    assert host.status is None
    assert host.check() == ModelStatus(str(tiny_checkpoint)) == host.status
    assert host.stats() is None


def test_a_load_that_works_once_the_checkpoint_is_fixed_clears_the_failure(tiny_checkpoint, tmp_path):
    model = broken_checkpoint(tiny_checkpoint, tmp_path, remove_weights)
    host = host_on(model, tmp_path)
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        host.engine  # noqa: B018 - a property that loads it
    assert host.status is not None and host.status.code == "no_weights"
    shutil.copy(tiny_checkpoint / "model.safetensors", model / "model.safetensors")
    try:
        host.engine  # noqa: B018 - the next region's load
        assert host.status == ModelStatus(str(model)) == host.check()
    finally:
        host.close()


@pytest.fixture
def prefix() -> Iterator[str]:
    with own_prefix() as prefix:
        yield prefix


def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_gpu_workers_verdict_is_on_the_broker_with_a_ttl_and_goes_when_it_stops(tiny_checkpoint, tmp_path,
                                                                                   prefix):
    host = host_on(broken_checkpoint(tiny_checkpoint, tmp_path, remove_weights), tmp_path)
    client = redis.Redis.from_url(REDIS)
    reporter = ModelStatusReporter(host, client, f"{prefix}gpu-a", ttl_s=3.0)
    reporter.start()
    try:
        assert eventually(lambda: status_reader(prefix).model_statuses() != [])
        [status] = status_reader(prefix).model_statuses()
        assert status.code == "no_weights" and status == host.status
        assert 0 < client.pttl(f"{prefix}gpu-a") <= 3000
        time.sleep(1.5)  # past a refresh (every ttl/3): the key was set again, so it never lapses while alive
        assert client.pttl(f"{prefix}gpu-a") > 1500
    finally:
        reporter.stop()
    assert status_reader(prefix).model_statuses() == [] and not reporter.is_alive()


def test_a_verdict_nobody_refreshes_expires_with_its_worker(prefix):
    client = redis.Redis.from_url(REDIS)
    client.set(f"{prefix}killed", ModelStatus("m", "no_weights", "gone").to_json(), px=200)
    assert len(status_reader(prefix).model_statuses()) == 1
    time.sleep(0.3)
    assert status_reader(prefix).model_statuses() == []
