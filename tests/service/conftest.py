"""The service as users run it, in subprocesses: `quire serve` alone (embedded: SQLite, local blobs, workers in the
process, no Redis, no Postgres), and `quire serve` beside a CPU and a GPU `quire worker` (distributed: the real
Postgres, the real Redis and real Celery workers). Both run on the session's tiny checkpoint with fast settings.

Redis is the one at 127.0.0.1:6379 that `make test` starts; each run takes a numbered Redis database of its own
and empties it first, so a stale queue from an aborted run cannot leak in.

The embedded service runs as a first-time user runs it, on 127.0.0.1 without API keys; the distributed one requires
keys (QUIRE_API_KEYS=required), made by `quire keys create` for two tenants, so every test there goes through them.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests import local_stack
from tests.local_stack import FAST, free_port, scratch_database

REDIS = "redis://127.0.0.1:6379"
# Webhook receivers in the tests listen on loopback, and retries come within a second.
WEBHOOKS = {"QUIRE_WEBHOOK_ALLOW": "127.0.0.1", "QUIRE_WEBHOOK_BACKOFF_S": "0.2", "QUIRE_WEBHOOK_BACKOFF_MAX_S": "0.5"}


@dataclass
class Service:
    url: str
    database_url: str
    logs: list[Path]
    env: dict[str, str] = field(default_factory=dict, repr=False)  # the QUIRE_* settings its processes run with
    keys: dict[str, str] = field(default_factory=dict)  # tenant → API key; empty when the service needs no keys

    def headers(self, tenant: str = "acme") -> dict[str, str]:
        """What a request acting for tenant sends: its key, or nothing where the service runs without keys."""
        return {"Authorization": f"Bearer {self.keys[tenant]}"} if self.keys else {}

    def quire(self, *args: str) -> str:
        """Run a `quire` command on this service's database and settings; its stdout."""
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=self.env, capture_output=True,
                              text=True, timeout=120, check=False, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr
        return done.stdout

    def tail(self) -> str:
        """The end of every process's log but its access lines (a test polling the API floods those), for a
        failure message short enough that the last log still shows."""
        def last(log: Path) -> str:
            lines = [line for line in log.read_text(errors="replace").splitlines() if "uvicorn.access" not in line]
            return "\n".join(lines)[-2000:]

        return "\n".join(f"--- {log.name}\n{last(log)}" for log in self.logs)


def quire_env(root: Path, model: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUIRE_")}
    env.update(FAST, QUIRE_MODEL=str(model), QUIRE_CACHE_DIR=str(root), QUIRE_BLOB_DIR=str(root / "blobs"), **extra)
    return env


@pytest.fixture(scope="session")
def processes() -> Iterator[list[subprocess.Popen]]:
    """Started processes, stopped (TERM, then KILL) when the session is done: the services start once and every
    service test shares them (a start costs 10–60 s here)."""
    started: list[subprocess.Popen] = []
    yield started
    stop(started)


def stop(processes: list[subprocess.Popen], timeout_s: float = 15.0) -> None:
    """TERM every process, then KILL those still running after timeout_s."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start(processes: list[subprocess.Popen], log: Path, env: dict[str, str], *args: str,
          new_session: bool = False) -> subprocess.Popen:
    """`quire *args` in a subprocess logging to log; new_session puts it in a process group of its own, so a test
    can kill it together with its children (a prefork worker's pool)."""
    with log.open("wb") as out:
        processes.append(subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2],
                                          start_new_session=new_session))
    return processes[-1]


def wait_for_health(service: Service, processes: list[subprocess.Popen], timeout_s: float = 90.0) -> None:
    local_stack.wait_for_health(service.url, processes, service.tail, timeout_s)


def wait_for_workers(broker_url: str, names: set[str], service: Service, timeout_s: float = 90.0) -> None:
    local_stack.wait_for_workers(broker_url, names, service.tail, timeout_s)


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = f"{REDIS}/{random.randint(1, 15)}"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at 127.0.0.1:6379 is not reachable (`make test` starts it): {exc}")
    return url


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path, processes) -> Service:
    """`quire serve` with nothing configured but the model: SQLite and blobs under its cache directory."""
    root = tmp_path_factory.mktemp("embedded")
    port = free_port()
    service = Service(f"http://127.0.0.1:{port}", f"sqlite:///{root / 'quire.db'}", [root / "serve.log"],
                      quire_env(root, tiny_checkpoint))
    start(processes, service.logs[0], service.env, "serve", "--port", str(port))
    wait_for_health(service, processes)
    return service


@pytest.fixture(scope="session")
def distributed(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path, redis_url: str,
                processes) -> Iterator[Service]:
    """`quire serve` (the API alone, keys required), a CPU worker (prefork, two processes) and a GPU worker (two
    threads); tenants `acme` and `globex` have a key each."""
    root = tmp_path_factory.mktemp("distributed")
    port = free_port()
    with scratch_database("quire_service") as database_url:
        env = quire_env(root, tiny_checkpoint, QUIRE_DATABASE_URL=database_url, QUIRE_BROKER_URL=redis_url,
                        QUIRE_API_KEYS="required", **WEBHOOKS)
        service = Service(f"http://127.0.0.1:{port}", database_url,
                          [root / "serve.log", root / "cpu.log", root / "gpu.log"], env)
        service.keys = {tenant: service.quire("keys", "create", "--tenant", tenant).strip()
                        for tenant in ("acme", "globex")}
        start(processes, service.logs[0], env, "serve", "--port", str(port))
        start(processes, service.logs[1], env, "worker", "--queues", "cpu", "--concurrency", "2")
        start(processes, service.logs[2], env, "worker", "--queues", "gpu", "--concurrency", "2")
        wait_for_health(service, processes)
        wait_for_workers(redis_url, {"quire-cpu", "quire-gpu"}, service)
        yield service
        stop(processes)  # before the database is dropped under them


@pytest.fixture(params=["embedded", "distributed"])
def service(request: pytest.FixtureRequest) -> Service:
    return request.getfixturevalue(request.param)
