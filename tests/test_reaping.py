"""The distributed reaper's chain guard on the real Redis: one run takes each interval's turn, a second chain's run
in the same half interval is refused (and so ends its chain), a retried run keeps the turn it took, and the turn
frees itself for the next interval."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from workers.reaping import take_turn

INTERVAL_S = 0.4


@pytest.fixture
def turn() -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    key = f"test:reap:{uuid.uuid4()}"  # never the live chains' key
    yield client, key
    client.delete(key)


def test_one_chain_reaps_each_interval(turn):
    client, key = turn
    assert take_turn(client, "run-a1", INTERVAL_S, key)
    assert not take_turn(client, "run-b1", INTERVAL_S, key)  # another chain, same half interval: it ends
    assert take_turn(client, "run-a1", INTERVAL_S, key)  # the same run retried after an error keeps its turn
    time.sleep(INTERVAL_S / 2 + 0.1)
    assert take_turn(client, "run-a2", INTERVAL_S, key)  # the chain's next run, an interval later
