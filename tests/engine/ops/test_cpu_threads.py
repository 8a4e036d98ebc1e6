"""OpenMP threads are sized to the cores the process may use and bound one per core."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from pipeline.engine.ops import cpu_threads


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _in_a_thread(work):
    """Run `work` in a fresh thread, as the engine's loop runs the model: OpenMP keeps a thread count and a team per
    thread that starts parallel work. Returns its result, the thread's own CPU mask and its thread count."""
    result = {}

    def run():
        result.update(value=work(), own=os.sched_getaffinity(0), threads=torch.get_num_threads())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result["value"], result["own"], result["threads"]


def test_threads_are_one_per_allowed_core_each_worker_bound_to_its_own(kernel, restore_threads):
    def bind_and_read_masks() -> list[tuple[int, set[int]]]:
        """Each bound worker's CPU and mask, read while the team lives (it ends with the thread that started it)."""
        return [(cpu, os.sched_getaffinity(tid)) for tid, cpu in cpu_threads.configure_cpu_threads()]

    cores = cpu_threads.allowed_cores()
    masks, own, threads = _in_a_thread(bind_and_read_masks)
    assert threads == len(cores)
    assert [cpu for cpu, _ in masks] == cores[1:]
    assert all(mask == {cpu} for cpu, mask in masks)
    assert own == os.sched_getaffinity(0), "the calling thread stays free: threads it starts inherit its mask"


def test_an_explicit_thread_count_is_kept(monkeypatch, restore_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _in_a_thread(cpu_threads.configure_cpu_threads)[2] == 1
    assert _in_a_thread(lambda: cpu_threads.configure_cpu_threads(threads=2))[2] == 2


def test_without_the_extension_threads_are_sized_but_not_bound(monkeypatch, restore_threads):
    monkeypatch.setattr(cpu_threads, "extension_module", lambda: None)
    bound, _, threads = _in_a_thread(cpu_threads.configure_cpu_threads)
    assert bound == [] and threads == len(cpu_threads.allowed_cores())


def test_smt_siblings_count_as_one_core():
    siblings = {0: "core0", 1: "core1", 2: "core0", 3: "core1"}
    assert cpu_threads.one_per_core([0, 1, 2, 3], siblings.__getitem__) == [0, 1]


@pytest.mark.parametrize(("value", "threads"), [("4", 4), ("4,2", 4), ("", None), ("0", None), ("many", None)])
def test_omp_num_threads_is_read_at_its_first_level(monkeypatch, value, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert cpu_threads.omp_num_threads() == threads
