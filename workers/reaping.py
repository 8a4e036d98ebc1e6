"""The distributed mode's reaper: a ReaperThread in every worker's main process, one of which reaps each interval.

No Celery beat (one more process to run and keep single), and no chain of countdown tasks either: a worker drops
the countdown tasks it holds when its broker connection drops, and Redis hands them back only after the visibility
timeout (an hour), so such a chain pauses right when work was lost. Each tick first takes the turn in Redis (SET NX,
expiring just before the next tick): one worker reaps per interval however many run, and when it dies another
takes over within an interval.
"""

from __future__ import annotations

import uuid

import redis

from pipeline.jobs.context import Context
from pipeline.jobs.reaper import ReaperThread

TURN_KEY = "quire:reap:turn"
TURN_SHARE = 0.9  # of the interval a turn is held: free again by the holder's next tick, whatever the clocks


def take_turn(client: redis.Redis, token: str, interval_s: float, key: str = TURN_KEY) -> bool:
    """True when the worker holding token may reap now: no other worker took the turn in the last 0.9 interval."""
    if client.set(key, token, nx=True, px=max(1, int(interval_s * 1000 * TURN_SHARE))):
        return True
    held = client.get(key)
    return held is not None and held.decode() == token


def start_reaper(ctx: Context) -> ReaperThread:
    """This worker's reaper thread, taking turns with every other worker's through the broker's Redis."""
    client, token = redis.Redis.from_url(ctx.settings.broker_url), uuid.uuid4().hex
    reaper = ReaperThread(ctx, lambda: take_turn(client, token, ctx.settings.reap_interval_s))
    reaper.start()
    return reaper
