"""The load benchmark's leak verdict: the steady state after the caches have filled, not the total growth, says
whether a GPU worker can run for weeks; a worker that levels off passes, one that keeps climbing fails."""

from __future__ import annotations

import argparse
import os

from benchmarks.load import moved_mappings, steady_state, verdicts
from tests.process_tree import mapping_rss_kib, vm_rss_kib

LIMITS = argparse.Namespace(max_growth=10.0, max_steady_growth=2.0, max_slope=200.0)


def _figures(points: list[tuple[int, int]], failed: int = 0) -> dict[str, object]:
    first, last = points[0][1], points[-1][1]
    return {"failed": failed, "gpu_rss_growth_pct": round(100 * (last - first) / first, 2),
            **steady_state(points, since=2000)}


def test_the_slope_is_kib_per_thousand_requests_over_the_readings_past_the_warm_up():
    points = [(0, 1_000_000), (1000, 1_050_000), (2000, 1_060_000), (3000, 1_060_300), (4000, 1_060_600)]
    assert steady_state(points, since=2000) == {"steady_from_requests": 2000, "steady_growth_pct": 0.06,
                                                "steady_slope_kib_per_1000": 300.0}


def test_one_reading_caught_after_the_allocator_gave_memory_back_does_not_decide_the_slope():
    points = [(2400, 1_475_180), (3000, 1_445_392), *((n, 1_485_068) for n in range(3600, 6001, 600))]
    assert steady_state(points, since=2000)["steady_slope_kib_per_1000"] == 0.0


def test_without_two_readings_past_the_warm_up_there_is_no_steady_state():
    assert steady_state([(0, 1000), (600, 1100), (2400, 1200)], since=2000)["steady_slope_kib_per_1000"] is None


def test_a_worker_that_levels_off_after_filling_its_caches_passes():
    wobble = [(n, 1_440_000 + (n // 600) % 2 * 900) for n in range(1200, 20401, 600)]
    points = [(0, 1_328_000), (600, 1_420_000), *wobble]
    assert verdicts(_figures(points), LIMITS) == []


def test_the_climb_issue_29_measured_fails_on_every_count():
    """The GPU worker's RSS in MiB every 600 requests on main at 96af202: 5 to 10 MiB more each batch."""
    mib = [1328, 1420, 1439, 1451, 1459, 1463, 1471, 1481, 1487, 1496, 1501]
    points = [(600 * i, value * 1024) for i, value in enumerate(mib)]
    assert verdicts(_figures(points), LIMITS) == [
        "RSS grew 13.03% (limit 10.0%)", "RSS grew 2.88% after 2400 requests (limit 2.0%)",
        "RSS slope 12800.0 KiB per 1,000 requests (limit 200.0)"]


def test_a_failed_document_fails_the_run_whatever_the_memory():
    assert verdicts(_figures([(0, 1000), (2000, 1000), (4000, 1000)], failed=1), LIMITS) == [
        "1 documents did not succeed"]


def test_a_reading_names_the_mappings_that_moved_four_mib_or_more():
    before = {"5566a5d27000 [heap]": 150_000, "7f3ca0000000 [anon]": 40_000, "7f1f01a00000 libtorch_cpu.so": 128_000}
    after = {"5566a5d27000 [heap]": 152_000, "7f3cb8000000 [anon]": 30_000, "7f1f01a00000 libtorch_cpu.so": 128_000}
    assert moved_mappings(before, after) == "7f3ca0000000 [anon] -39 MiB, 7f3cb8000000 [anon] +29 MiB"


def test_a_processes_mappings_add_up_to_its_resident_memory():
    """Its own, without the processes under it (a test worker runs whole service stacks there)."""
    mappings, own = mapping_rss_kib(os.getpid()), vm_rss_kib(os.getpid())
    assert any(name.endswith(" [heap]") for name in mappings)
    assert abs(sum(mappings.values()) - own) < 0.05 * own
