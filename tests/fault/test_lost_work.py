"""Work that no redelivery covers: the GPU worker vanishes and the broker loses every GPU task with it (as a Redis
without persistence does when it restarts). Nothing would ever send those pages on again; the reaper (a thread in
each worker, one reaping per interval) sees the document stand still and sends it again, and it succeeds.
"""

from __future__ import annotations

import json

import redis

from tests.fault.conftest import REAP_AFTER_S, Faulty, assert_done_once, mid_document

QUEUE = "gpu"


def test_a_document_whose_worker_and_tasks_vanished_is_sent_again_by_the_reaper(faulty: Faulty) -> None:
    document_id, finished = mid_document(faulty, "Lost with its worker")
    faulty.kill_worker("gpu")
    lost = forget_queue(faulty.redis.client(), QUEUE)
    faulty.start_worker("gpu")
    faulty.wait_for_workers("gpu")
    assert lost > 0
    assert_done_once(faulty, document_id, finished)
    assert faulty.logged(document_id, f"has not moved for {REAP_AFTER_S} s"), faulty.service.tail()


def forget_queue(client: redis.Redis, queue: str) -> int:
    """Drop every message of queue from the broker: waiting ones (Celery's Redis transport keeps a list per queue
    and priority) and ones delivered but not acknowledged (a hash and an index of them); how many went."""
    lists = [key for key in client.scan_iter(f"{queue}*") if key == queue.encode() or key.startswith(
        f"{queue}\x06\x16".encode())]
    lost = sum(client.llen(key) for key in lists)
    if lists:
        client.delete(*lists)
    for tag, payload in client.hgetall("unacked").items():
        if json.loads(payload)[2] == queue:  # (message, exchange, routing key)
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)
            lost += 1
    return lost
