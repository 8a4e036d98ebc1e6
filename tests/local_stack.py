"""What starting Quire's processes on this machine takes, for the tests that do and for the benchmarks' stack
(benchmarks/stack.py), which is why it lives here and the benchmarks import it: the fast settings, a free loopback
port, a scratch database on the local Postgres, and the waits until `quire serve` answers /health and until Celery
workers answer a ping.

Postgres is the one at 127.0.0.1:5432 (trust auth, user postgres) that `make test` starts; a scratch database is
created through the `postgres` maintenance database under a unique name and dropped at the end, so runs never see
each other's tables.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import httpx
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432"
# No text layer, so every text region goes to the engine; the `pdf` layout; 40 dpi; 4 tokens per region.
FAST = {"QUIRE_MAX_TOKENS": "4", "QUIRE_DPI": "40", "QUIRE_LAYOUT": "pdf", "QUIRE_TEXT_LAYER": "off",
        "QUIRE_GPU_THREADS": "2", "QUIRE_CPU_THREADS": "2"}


def free_port() -> int:
    """A loopback port nothing listens on now (the OS's pick), for a server a test or a benchmark starts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A database of this run's own on the local Postgres, dropped (connections and all) at the end; its URL."""
    maintenance = create_engine(f"{POSTGRES}/postgres", isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with maintenance.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        maintenance.dispose()
        raise RuntimeError(f"Postgres at 127.0.0.1:5432 is not reachable (`make test` starts it): {exc}") from exc
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        with maintenance.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        maintenance.dispose()


def wait_for_health(url: str, processes: Iterable[subprocess.Popen], tail: Callable[[], str],
                    timeout_s: float = 120.0) -> None:
    """Return once url's /health answers 200; RuntimeError (with tail()) when a process exits first or time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in processes):
            raise RuntimeError(f"a service process exited early\n{tail()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the API did not answer /health in {timeout_s} s\n{tail()}")


def wait_for_workers(broker_url: str, names: set[str], tail: Callable[[], str], timeout_s: float = 120.0) -> None:
    """Return once Celery workers with these names (before the @) answer a ping; RuntimeError when time is up."""
    from celery import Celery

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        probe = Celery(broker=broker_url)
        try:
            replies = {name.split("@")[0] for reply in probe.control.ping(timeout=1.0) for name in reply}
        except redis.ConnectionError:  # a connection kept from before a broker restart
            replies = set()
        finally:
            probe.close()
        if names <= replies:
            return
    raise RuntimeError(f"workers {names} did not answer a ping in {timeout_s} s\n{tail()}")
