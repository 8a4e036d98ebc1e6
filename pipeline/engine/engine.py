"""The resident engine as services share it: the synchronous core (core.py) stepped by one background loop thread.

`submit` and `stream` hand requests to the loop, so Celery threads and HTTP handlers share a single engine; the
core's synchronous interface (`generate`, `step`) stays for offline batches. Requests are preprocessed in the
caller's thread; only the loop touches the scheduler.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future

from .core import EngineConfig, EngineCore
from .devices import exit_on_device_failure, is_sticky_device_error
from .host_memory import MemoryTrimmer
from .model.paddleocr_vl import PaddleOCRVL
from .processor import Processor
from .request import Delta, Output, Request
from .sequence import Sequence


class Engine(EngineCore):
    """The core plus its loop thread, started by the first `submit`; each request's future resolves as it ends."""

    def __init__(self, model: PaddleOCRVL, processor: Processor, config: EngineConfig | None = None) -> None:
        super().__init__(model, processor, config)
        self._inbox: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        self._futures: dict[str, Future[Output]] = {}
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self.trimmer = MemoryTrimmer()

    def submit(self, request: Request | Sequence, on_delta: Callable[[Delta], None] | None = None) -> Future[Output]:
        """Thread-safe: queue a request for the background loop; the future resolves to its Output."""
        future: Future[Output] = Future()
        seq = request if isinstance(request, Sequence) else self.prepare(request)
        future.request_id = seq.request_id
        self._inbox.put(("add", (seq, future, on_delta)))
        self._ensure_loop()
        return future

    def cancel(self, request_id: str) -> None:
        """Thread-safe abort."""
        self._inbox.put(("abort", request_id))
        self._wake.set()

    async def stream(self, request: Request | Sequence) -> AsyncIterator[Delta]:
        """Deltas of one request as they are produced; the last carries finish_reason."""
        loop = asyncio.get_running_loop()
        deltas = asyncio.Queue()
        deltas: asyncio.Queue[Delta | None]
        future = self.submit(request, lambda d: loop.call_soon_threadsafe(deltas.put_nowait, d))
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(deltas.put_nowait, None))
        try:
            while (delta := await deltas.get()) is not None:
                yield delta
                if delta.finish_reason is not None:
                    return
            future.result()
        finally:
            if not future.done():
                self.cancel(future.request_id)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=10)

    def _ensure_loop(self) -> None:
        """Start the loop thread unless it runs: under a lock, as submit is called from many threads at once and two
        loops would step one scheduler together (a GPU worker's first pages failed with IndexError that way)."""
        self._wake.set()
        with self._loop_lock:
            if self._loop_thread is None or not self._loop_thread.is_alive():
                self._loop_thread = threading.Thread(target=self._loop, name="quire-engine", daemon=True)
                self._loop_thread.start()

    def _loop(self) -> None:
        while not self._closed:
            self._drain_inbox()
            if not self.has_unfinished():
                self.trimmer.idle()
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            self.trimmer.busy()
            try:
                self.step()
            except Exception as exc:  # a broken step fails its requests, never the loop, unless the GPU is gone
                if is_sticky_device_error(exc):
                    exit_on_device_failure(exc)
                self._fail_all(exc)

    def _drain_inbox(self) -> None:
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "abort":
                self.abort(payload)
                continue
            seq, future, on_delta = payload
            try:
                self.add_request(seq)
            except Exception as exc:  # refused here, the request fails; the loop lives on
                future.set_exception(exc)
                continue
            self._futures[seq.request_id] = future
            if on_delta is not None:
                self.listeners[seq.request_id] = on_delta

    def _fail_all(self, exc: Exception) -> None:
        for seq in list(self.sequences.values()):
            future = self._futures.pop(seq.request_id, None)
            self.listeners.pop(seq.request_id, None)
            self.scheduler.finish(seq, "error")
            self.sequences.pop(seq.request_id, None)
            if future is not None:
                future.set_exception(exc)

    def _finish(self, seq: Sequence, reason: str) -> Output:
        """The core's finish, then the request's future (one submitted to the loop) resolves to its output."""
        out = super()._finish(seq, reason)
        future = self._futures.pop(seq.request_id, None)
        if future is not None:
            future.set_result(out)
        return out
