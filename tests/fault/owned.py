"""A Redis and a Postgres cluster that the fault tests own: on free ports, in temp directories, stopped and
started again by the tests, and removed afterwards. The CI machine's shared Redis and Postgres are never touched.

Both keep their data across a restart, as an operator runs them: Redis with its append-only file (so queues and
unacknowledged tasks come back), Postgres as any cluster does. Postgres refuses to run as root, so as root the
cluster runs as the `postgres` user, in a directory of its own outside pytest's root-only temp tree.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis

from tests.local_stack import free_port


def until(condition: Callable[[], bool], timeout_s: float, message: str, tail: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{message} in {timeout_s} s\n{tail()}")
        time.sleep(0.05)


class OwnedRedis:
    """redis-server on a port of its own, keeping an append-only file in root/redis."""

    def __init__(self, root: Path) -> None:
        self.port, self.dir, self.log = free_port(), root / "redis", root / "redis.log"
        self.dir.mkdir()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "yes", "--dir", str(self.dir)], stdout=out, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port)
        until(lambda: _answers(client.ping), 10, "Redis did not answer a ping", self.log.read_text)

    def stop(self) -> None:
        """A clean stop (SIGTERM): Redis writes its append-only file out before it exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


class OwnedPostgres:
    """A Postgres cluster made by initdb (trust auth, user postgres) listening on 127.0.0.1 on a port of its own."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="quire-pg-"))
        self.data, self.log = self.root / "data", self.root / "postgres.log"
        self.bin = _postgres_bin()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self) -> None:
        """A fast shutdown: open connections are cut, and new ones are refused until start()."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def refuses_connections(self) -> bool:
        return not _answers(lambda: psycopg.connect(self.url().replace("+psycopg", ""), connect_timeout=2).close())

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url().replace("+psycopg", ""), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        """Stop the cluster if it runs and delete its directory."""
        subprocess.run(self._command("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"),
                       capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(self._command(tool, *args), capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            pytest.fail(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}\n{log[-2000:]}")

    def _command(self, tool: str, *args: str) -> list[str]:
        command = [str(self.bin / tool), *args]
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _postgres_bin() -> Path:
    """The server binaries: Debian keeps them under /usr/lib/postgresql/N/bin, off PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    if not found[-1]:
        pytest.fail("initdb is not installed: the Postgres outage test needs a cluster of its own")
    return Path(found[-1]).parent


def _answers(call: Callable[[], object]) -> bool:
    try:
        call()
    except (redis.ConnectionError, psycopg.OperationalError):
        return False
    return True
