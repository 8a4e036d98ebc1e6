"""Where page tasks (page_work.py) run: in the caller's thread (InlinePages), or in worker processes (PagePool).

Both take tasks with `send` and hand each result to the function given to `connect`, so the stream (stream.py)
drives either the same way: it keeps at most `capacity` tasks outstanding and lays out, where the layout is a model,
the pages they render (`layout`, when `lays_out` is false).

The pool's workers are started with `spawn` (a fork after torch's threads start can hang) and import no torch.
Each has a pipe of tasks and a pipe of results; one thread of this process reads every result pipe and watches
every worker. Pixels never go through a pipe: a page's crops, already cut to the model's grid as uint8, and a page
image travel in one shared-memory block per message, which the receiving side copies out and unlinks. A worker
that dies (MuPDF on a hostile file, the kernel's OOM killer) fails the tasks it held, each page with `corrupt`,
and is replaced; the other pages go on.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import signal
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pipeline.documents.layout import AutoLayout, LayoutBackend, NamedLayout, batches, layout_backend
from pipeline.documents.page_work import (
    Crop,
    PageWork,
    PageWorker,
    PageWorkTask,
    RegionsTask,
    Rendered,
    Result,
    failed_work,
)
from pipeline.documents.process import ProcessOptions
from pipeline.documents.results import Problem
from pipeline.engine.images import ImageSettings, ModelImage

Deliver = Callable[[Result], None]
TASKS_PER_WORKER = 2  # one being worked on and one waiting, so a worker never idles between tasks
READY = "ready"  # what a worker says once, when it can take tasks


class InlinePages:
    """Page tasks in the caller's thread, one at a time: each runs when it is sent."""

    capacity = 1

    def __init__(self, layout: LayoutBackend, options: ProcessOptions,
                 image_settings: ImageSettings | None = None) -> None:
        self.layout = layout
        self.lays_out = not batches(layout)
        self.worker = PageWorker(layout, self.lays_out, options, image_settings)
        self._deliver: Deliver | None = None

    def connect(self, deliver: Deliver) -> None:
        self._deliver = deliver

    def send(self, task: PageWorkTask) -> None:
        assert self._deliver is not None, "connect first"
        self._deliver(self.worker.run(task))

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> InlinePages:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process is started with: the layout it runs (a model-free backend by name), or the name of the
    layout that runs in the engine's process; the run's options; the checkpoint's image settings."""

    layout: str
    lays_out: bool
    options: ProcessOptions
    image_settings: ImageSettings | None
    owner: int  # the pool's process, whose id names every shared block the pool's messages use

    @classmethod
    def of(cls, layout: LayoutBackend, options: ProcessOptions, image_settings: ImageSettings | None) -> WorkerSetup:
        lays_out = not batches(layout)
        if lays_out and layout.name not in ("pdf", "page", "auto"):
            raise ValueError(f"page workers run the pdf, page and auto layouts by name, not {layout.name!r}")
        return cls(layout.name, lays_out, options, image_settings, os.getpid())

    def worker(self) -> PageWorker:
        if not self.lays_out:
            backend: LayoutBackend = NamedLayout(self.layout)
        elif self.layout == "auto":
            backend = AutoLayout(None)
        else:
            backend = layout_backend(self.layout)
        return PageWorker(backend, self.lays_out, self.options, self.image_settings)


class PagePool:
    """Page tasks in `workers` processes; `layout` is the engine process's own backend (the one that lays out
    rendered pages when it is a model)."""

    def __init__(self, layout: LayoutBackend, options: ProcessOptions, workers: int,
                 image_settings: ImageSettings | None = None) -> None:
        self.layout = layout
        self.setup = WorkerSetup.of(layout, options, image_settings)
        self.lays_out = self.setup.lays_out
        self.capacity = max(1, workers) * TASKS_PER_WORKER
        self._size = max(1, workers)
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._deliver: Deliver | None = None
        self._reader: threading.Thread | None = None
        self._closing = False

    def connect(self, deliver: Deliver) -> None:
        """Route results to `deliver` (from the pool's reader thread); starts the workers on first use."""
        with self._lock:
            self._deliver = deliver
        self.start()

    def start(self, timeout: float | None = None) -> bool:
        """Start the workers unless they run; with `timeout`, wait that long for each to be ready (imported, its
        layout built): whether all are."""
        with self._lock:
            if self._reader is None:
                self._workers = [self._start() for _ in range(self._size)]
                self._reader = threading.Thread(target=self._read, name="quire-page-pool", daemon=True)
                self._reader.start()
            workers = list(self._workers)
        return timeout is None or all(worker.ready.wait(timeout) for worker in workers)

    def send(self, task: PageWorkTask) -> None:
        if not isinstance(task.source, Path):
            raise TypeError("page workers open documents from files; process bytes in the caller's thread")
        with self._lock:
            worker = min(self._workers, key=lambda each: len(each.tasks))
            worker.tasks.append(task)
        try:
            worker.send(task)
        except (BrokenPipeError, OSError):  # it died: the reader fails its tasks, this one among them
            pass

    def close(self) -> None:
        with self._lock:
            self._closing = True
            workers, self._workers = self._workers, []
        if self._reader is not None:  # first, so no pipe is closed under its wait
            self._reader.join(timeout=5)
        for worker in workers:
            worker.stop()

    def __enter__(self) -> PagePool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start(self) -> _Worker:
        tasks_read, tasks_write = self._context.Pipe(duplex=False)
        results_read, results_write = self._context.Pipe(duplex=False)
        process = self._context.Process(target=serve, args=(self.setup, tasks_read, results_write),
                                        name="quire-page-worker", daemon=True)
        process.start()
        tasks_read.close()
        results_write.close()
        return _Worker(process, tasks_write, results_read)

    def _read(self) -> None:
        """Hand on each result as it comes; replace a worker that died, failing the tasks it held."""
        while True:
            with self._lock:
                if self._closing:
                    return
                watched: dict[Any, _Worker] = {worker.results: worker for worker in self._workers}
                watched.update({worker.process.sentinel: worker for worker in self._workers})
            for ready in wait(list(watched), timeout=0.2):
                worker = watched[ready]
                if ready is worker.results:
                    self._received(worker)
                    continue
                while not worker.results.closed and worker.results.poll():  # what it sent before it ended
                    self._received(worker)
                self._replace(worker)

    def _received(self, worker: _Worker) -> None:
        try:
            message = worker.results.recv()
        except (EOFError, OSError):
            self._replace(worker)
            return
        if message == READY:
            worker.ready.set()
            return
        with self._lock:
            task = worker.tasks.popleft()
            deliver = self._deliver
        try:
            result = unpack(message)
        except (OSError, ValueError) as exc:  # its pixels could not be read back: the page fails, not the pool
            result = failed_work(task, Problem("corrupt", f"the page's pixels were lost on their way: {exc}"))
        deliver(result)

    def _replace(self, dead: _Worker) -> None:
        dead.process.join(timeout=1)
        with self._lock:
            if dead not in self._workers:
                return
            lost, dead.tasks = list(dead.tasks), deque()
            self._workers.remove(dead)
            if not self._closing:
                self._workers.append(self._start())
            deliver = self._deliver
        dead.close()
        problem = Problem("corrupt", f"the page worker reading it died (exit code {dead.process.exitcode}): "
                                     f"the file's content crashed the renderer, or the machine ran out of memory")
        for task in lost:
            deliver(failed_work(task, problem))


class _Worker:
    def __init__(self, process: multiprocessing.process.BaseProcess, tasks: Connection, results: Connection) -> None:
        self.process, self.results = process, results
        self._tasks = tasks
        self.tasks: deque[PageWorkTask] = deque()  # sent and not yet answered, in order
        self.ready = threading.Event()  # it said it is ready for tasks

    def send(self, task: PageWorkTask) -> None:
        self._tasks.send(pack(task, os.getpid()))

    def stop(self) -> None:
        try:
            self._tasks.send(None)
        except OSError:
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
        self.close()

    def close(self) -> None:
        self._tasks.close()
        self.results.close()


def serve(setup: WorkerSetup, tasks: Connection, results: Connection) -> None:
    """A worker process: run each task and send its result back, until told to stop (None) or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops the workers
    worker = setup.worker()
    results.send(READY)
    try:
        while (message := _next(tasks)) is not None:
            results.send(pack(worker.run(unpack(message)), setup.owner))
    finally:
        worker.close()


def _next(tasks: Connection) -> Any:
    try:
        return tasks.recv()
    except (EOFError, OSError):
        return None


# --- pixels through shared memory --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Slot:
    """Where one array lies in a message's shared block, and what it was."""

    offset: int
    shape: tuple[int, ...]
    grid: tuple[int, int, int] | None = None  # a ModelImage's; None: an RGB image's pixels


@dataclass(frozen=True)
class _Packed:
    message: Any
    block: str | None


def block_prefix(owner: int) -> str:
    """How the shared blocks of a pool owned by process `owner` are named: one left behind (a process killed
    between pack and unpack) says whose it was."""
    return f"quire-{owner}-"


def pack(message: Any, owner: int) -> _Packed:
    """The message with its pixels moved into one new shared-memory block (crops, or a page image) named for the
    pool's `owner`."""
    if isinstance(message, PageWork) and any(crop.pixels is not None for crop in message.crops):
        pixels = [crop.pixels for crop in message.crops if crop.pixels is not None]
        block, slots = _share([_array(each) for each in pixels], owner)
        slot = iter(replace(slot, grid=each.grid if isinstance(each, ModelImage) else None)
                    for slot, each in zip(slots, pixels, strict=True))
        crops = [crop if crop.pixels is None else replace(crop, pixels=next(slot)) for crop in message.crops]
        return _Packed(replace(message, crops=crops), block)
    if isinstance(message, Rendered | RegionsTask):
        block, (slot,) = _share([np.asarray(message.page.image)], owner)
        return _Packed(replace(message, page=replace(message.page, image=slot)), block)
    return _Packed(message, None)


def unpack(packed: _Packed) -> Any:
    """The message as it was packed, its shared block copied out and unlinked."""
    message = packed.message
    if packed.block is None:
        return message
    memory = SharedMemory(packed.block)
    try:
        if isinstance(message, PageWork):
            return replace(message, crops=[_crop_from(memory, crop) for crop in message.crops])
        image = Image.fromarray(_copy(memory, message.page.image))
        return replace(message, page=replace(message.page, image=image))
    finally:
        memory.close()
        memory.unlink()


def _array(pixels: ModelImage | Image.Image) -> np.ndarray:
    return pixels.patches if isinstance(pixels, ModelImage) else np.asarray(pixels.convert("RGB"))


def _share(arrays: list[np.ndarray], owner: int) -> tuple[str, list[_Slot]]:
    total = sum(array.nbytes for array in arrays)
    memory = SharedMemory(block_prefix(owner) + secrets.token_hex(8), create=True, size=max(1, total))
    slots, offset = [], 0
    for array in arrays:
        np.ndarray(array.shape, np.uint8, memory.buf, offset)[...] = array
        slots.append(_Slot(offset, array.shape))
        offset += array.nbytes
    name = memory.name
    memory.close()
    return name, slots


def _crop_from(memory: SharedMemory, crop: Crop) -> Crop:
    slot = crop.pixels
    if not isinstance(slot, _Slot):
        return crop
    pixels = _copy(memory, slot)
    if slot.grid is not None:
        return replace(crop, pixels=ModelImage(pixels, slot.grid))
    return replace(crop, pixels=Image.fromarray(pixels))


def _copy(memory: SharedMemory, slot: _Slot) -> np.ndarray:
    return np.ndarray(slot.shape, np.uint8, memory.buf, slot.offset).copy()


def default_workers(engine_on_cpu: bool) -> int:
    """The machine's cores, less one where the engine computes on the CPU too."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 1) if engine_on_cpu else cores
