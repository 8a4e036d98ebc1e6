"""A distributed Quire for a benchmark, in subprocesses: a scratch Postgres database (created, migrated with
`quire migrate`, dropped at the end), a throwaway redis-server on a free port (so no other run's Redis database is
touched), `quire serve` (the API alone, without keys, on loopback) and two Celery workers, `--queues cpu` and
`--queues gpu`, on a given model directory or a tiny checkpoint written into the run's temp directory.

The settings are the service tests' fast ones (tests/local_stack.py FAST: no text layer, so every text region goes to
the engine; the `pdf` layout; 40 dpi; 4 tokens per region), and the free port, scratch database and waits are theirs
too. The GPU worker serves its engine's counters on QUIRE_METRICS_PORT, which is how a benchmark reads the engine's
busy time from outside. Each process runs in a session of its own, so the end of the run stops it together with its
children (the CPU worker's prefork pool) and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import redis

from pipeline.engine_metrics import ENGINE_COUNTERS
from tests.local_stack import FAST, free_port, scratch_database, wait_for_health, wait_for_workers
from tests.process_tree import tree_cpu_s

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Stack:
    """The running service: its URL, where its logs go, and its processes by role (serve, cpu, gpu)."""

    url: str
    root: Path
    env: dict[str, str]
    metrics_port: int
    redis: subprocess.Popen
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def cpu_s(self) -> float:
        """CPU seconds the stack's processes (their children and its redis-server with them) have used so far."""
        return sum(tree_cpu_s(process.pid) for process in [*self.processes.values(), self.redis])

    def engine_stats(self) -> dict[str, float]:
        """The GPU worker's engine metrics (quire_engine_*), by the stats() name; empty before its engine loads."""
        body = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        stats = {}
        for line in body.splitlines():
            if line.startswith("quire_engine_"):
                metric, value = line.split()
                stats[_stat_name(metric)] = float(value)
        return stats

    def stage_ms(self, since: float, field: str = "duration_ms") -> dict[str, float]:
        """Milliseconds the workers' stage tasks ran (or, with field `cpu_ms`, their threads' CPU time), summed per
        stage: that field of the `done` lines they logged (JSON) at or after the Unix time `since`."""
        totals: dict[str, float] = {}
        for role in ("cpu", "gpu"):
            for line in (self.root / f"{role}.log").read_text(errors="replace").splitlines():
                record = _json_line(line)
                if record.get("outcome") == "done" and datetime.fromisoformat(record["time"]).timestamp() >= since:
                    totals[record["stage"]] = totals.get(record["stage"], 0.0) + record[field]
        return totals

    def tail(self) -> str:
        """The end of every process's log, for an error message."""
        return "\n".join(f"--- {role}\n{(self.root / f'{role}.log').read_text(errors='replace')[-3000:]}"
                         for role in self.processes)


def _json_line(line: str) -> dict:
    """A JSON log line as a dict; anything else (Celery's own banner, a traceback) as an empty one."""
    try:
        record = json.loads(line)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _stat_name(metric: str) -> str:
    """quire_engine_blocks_used → blocks_used; a counter's quire_engine_busy_ms_total → busy_ms."""
    name = metric.removeprefix("quire_engine_")
    counter = name.removesuffix("_total")
    return counter if counter in ENGINE_COUNTERS else name


def exit_on_sigterm() -> None:
    """Make SIGTERM a SystemExit, so a benchmark stopped from outside still stops its stack (whose processes run in
    sessions of their own) and drops its database on the way out."""
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))


@contextmanager
def distributed_stack(root: Path, model: Path | None = None, cpu_concurrency: int = 2,
                      gpu_concurrency: int = 2, **settings: str) -> Iterator[Stack]:
    """The service running under root (logs, blobs, the tiny checkpoint when no model is given), stopped and its
    database dropped on the way out; `settings` override the fast QUIRE_* ones."""
    if model is None:
        from pipeline.samples.tiny_checkpoint import write_tiny_checkpoint

        model = write_tiny_checkpoint(root / "tiny-checkpoint")
    with ExitStack() as cleanup:
        redis_server, broker_url = cleanup.enter_context(_throwaway_redis(root))
        database_url = cleanup.enter_context(scratch_database("quire_bench"))
        stack = Stack(f"http://127.0.0.1:{free_port()}", root, {}, free_port(), redis_server)
        stack.env = _env(root, model, QUIRE_DATABASE_URL=database_url, QUIRE_BROKER_URL=broker_url,
                         QUIRE_API_KEYS="off", QUIRE_METRICS_PORT=str(stack.metrics_port), **settings)
        _quire(stack.env, "migrate")
        cleanup.callback(_stop, stack.processes)
        port = stack.url.rsplit(":", 1)[1]
        _start(stack, "serve", "serve", "--port", port)
        _start(stack, "cpu", "worker", "--queues", "cpu", "--concurrency", str(cpu_concurrency))
        _start(stack, "gpu", "worker", "--queues", "gpu", "--concurrency", str(gpu_concurrency))
        wait_for_health(stack.url, stack.processes.values(), stack.tail)
        wait_for_workers(broker_url, {"quire-cpu", "quire-gpu"}, stack.tail)
        yield stack


@contextmanager
def embedded_service(root: Path, model: Path | str, **settings: str) -> Iterator[str]:
    """`quire serve` in its embedded mode (no broker: SQLite and blobs under root, the workers and the engine in its
    own process) on a free loopback port, without keys; its URL once it answers, stopped on the way out."""
    env = _env(root, Path(model), QUIRE_API_KEYS="off", **settings)
    url = f"http://127.0.0.1:{free_port()}"
    processes: dict[str, subprocess.Popen] = {}
    with (root / "serve.log").open("wb") as log:
        processes["serve"] = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port",
                                               url.rsplit(":", 1)[1]], env=env, stdout=log, stderr=subprocess.STDOUT,
                                              cwd=ROOT, start_new_session=True)
    try:
        wait_for_health(url, processes.values(), lambda: (root / "serve.log").read_text(errors="replace")[-3000:])
        yield url
    finally:
        _stop(processes)


def _env(root: Path, model: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUIRE_")}
    env.update(FAST)
    env.update(QUIRE_MODEL=str(model), QUIRE_CACHE_DIR=str(root), QUIRE_BLOB_DIR=str(root / "blobs"), **extra)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _quire(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"quire {' '.join(args)} failed:\n{done.stderr}")


def _start(stack: Stack, role: str, *args: str) -> None:
    with (stack.root / f"{role}.log").open("wb") as log:
        stack.processes[role] = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], env=stack.env,
                                                 stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                                 start_new_session=True)


def _stop(processes: dict[str, subprocess.Popen], timeout_s: float = 15.0) -> None:
    """TERM each process group, then KILL the groups whose leader has not exited in timeout_s."""
    for process in processes.values():
        _signal_group(process, signal.SIGTERM)
    for process in processes.values():
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


@contextmanager
def _throwaway_redis(root: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """redis-server on a free loopback port, without persistence; it and its URL (database 0, empty at start)."""
    port = free_port()
    with (root / "redis.log").open("wb") as log:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT)
    try:
        client, deadline = redis.Redis(port=port), time.monotonic() + 10
        while not _pings(client):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"redis-server did not start:\n{(root / 'redis.log').read_text()}")
            time.sleep(0.05)
        yield server, f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False

