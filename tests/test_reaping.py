"""The distributed reaper's turns on the real Redis: every worker runs a reaper thread, one of them reaps each
interval, and a tick that fails does not end the thread."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pipeline.config import Settings
from pipeline.db.migrate import upgrade_to_head
from pipeline.jobs.context import Context, open_context
from pipeline.jobs.reaper import ReaperThread
from workers.reaping import TURN_SHARE, take_turn

INTERVAL_S = 0.4


@pytest.fixture
def turn() -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    key = f"test:reap:{uuid.uuid4()}"  # never the live workers' key
    yield client, key
    client.delete(key)


@pytest.fixture
def context(tmp_path: Path) -> Iterator[Context]:
    """A context on an empty migrated SQLite database, reaping every 100 ms; nothing is ever sent."""
    url = f"sqlite:///{tmp_path / 'quire.db'}"
    upgrade_to_head(url)
    settings = Settings(database_url=url, blob_dir=tmp_path / "blobs", reap_interval_s=0.1)
    context = open_context(settings, dispatcher=None)
    yield context
    context.close()


def test_one_worker_holds_each_interval_s_turn(turn):
    client, key = turn
    assert take_turn(client, "worker-a", INTERVAL_S, key)
    assert not take_turn(client, "worker-b", INTERVAL_S, key)  # another worker's tick in the same interval
    assert take_turn(client, "worker-a", INTERVAL_S, key)  # the holder asking again keeps its turn
    time.sleep(INTERVAL_S * TURN_SHARE + 0.05)
    assert take_turn(client, "worker-b", INTERVAL_S, key)  # free before the next tick: whoever comes first


def test_two_workers_reap_about_once_per_interval_not_twice(turn, context):
    client, key = turn
    turns: list[str] = []

    def worker(name: str) -> ReaperThread:
        def my_turn() -> bool:
            taken = take_turn(client, name, context.settings.reap_interval_s, key)
            if taken:
                turns.append(name)
            return taken
        return ReaperThread(context, my_turn)

    reapers = [worker("worker-a"), worker("worker-b")]
    for reaper in reapers:
        reaper.start()
    time.sleep(1.5)
    for reaper in reapers:
        reaper.stop()
    assert 5 <= len(turns) <= 20  # 15 intervals; both reaping at every tick would be about 30


def test_a_tick_that_fails_leaves_the_thread_reaping(context):
    calls: list[float] = []

    def my_turn() -> bool:
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise redis.ConnectionError("the broker is restarting")
        return True

    reaper = ReaperThread(context, my_turn)
    reaper.start()
    time.sleep(0.8)
    reaper.stop()
    assert len(calls) >= 4
