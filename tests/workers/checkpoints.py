"""Broken copies of the session's tiny checkpoint, hosts on them, and a key prefix of a test's own on the shared
Redis, for the tests of how a model that does not load is found and reported."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from pipeline.config import Settings
from workers.celery_app import CeleryDispatcher, create_celery
from workers.engine_host import EngineHost

REDIS = "redis://127.0.0.1:6379/0"


def remove_weights(directory: Path) -> None:
    (directory / "model.safetensors").unlink()


def truncate_weights(directory: Path) -> None:
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])


def remove_directory(directory: Path) -> None:
    shutil.rmtree(directory)


def broken_checkpoint(tiny_checkpoint: Path, under: Path, breaks: Callable[[Path], None]) -> Path:
    copy = under / f"checkpoint-{breaks.__name__}"
    shutil.copytree(tiny_checkpoint, copy)
    breaks(copy)
    return copy


def host_on(model: Path, cache_dir: Path) -> EngineHost:
    """A host with a small CPU engine, as the tests' GPU workers run it."""
    return EngineHost(Settings(model=str(model), cache_dir=cache_dir, device="cpu", kv_cache_memory=16 << 20))


@contextmanager
def own_prefix() -> Iterator[str]:
    """A model-status key prefix no live worker publishes under; its keys are deleted afterwards."""
    prefix = f"test:model-status:{uuid.uuid4()}:"
    yield prefix
    client = redis.Redis.from_url(REDIS)
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


def status_reader(prefix: str) -> CeleryDispatcher:
    """The API's dispatcher in the distributed mode, reading the model statuses published under prefix."""
    return CeleryDispatcher(create_celery(Settings(_env_file=None, broker_url=REDIS)), model_status_prefix=prefix)
