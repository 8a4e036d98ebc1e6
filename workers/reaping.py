"""The distributed mode's reaper schedule: a chain of `quire.reap` tasks, each sending the next with a countdown.

No Celery beat (one more process to run and keep single): every worker, when it is ready, starts a chain, and each
run first takes the turn for its interval in Redis (SET NX with an expiry of half the interval). A run that finds
the turn taken by another chain ends its own chain, so however many workers started one, or a redelivered task
forked one, the chains fall back to one within an interval; a run retried after a Redis error holds the turn it
took (the turn's value is its task id). The chain dies only if a run cannot reach Redis through all its retries;
the next worker start begins a new one.
"""

from __future__ import annotations

import redis

TURN_KEY = "quire:reap:turn"


def take_turn(client: redis.Redis, token: str, interval_s: float, key: str = TURN_KEY) -> bool:
    """True when this run (token) may reap now: no other run took the turn in the last half interval."""
    if client.set(key, token, nx=True, px=max(1, int(interval_s * 500))):
        return True
    held = client.get(key)
    return held is not None and held.decode() == token
