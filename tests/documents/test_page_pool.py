"""Page workers in processes: the same results as this thread, pixels through shared memory, no torch, and a
worker that dies fails the pages it held and nothing else.

These run the real pool (spawned processes) and, where a model is needed, the real tiny engine.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from queue import SimpleQueue

import numpy as np
import pytest
from PIL import Image

from pipeline.config import Settings
from pipeline.documents.assemble import document_json, document_markdown
from pipeline.documents.layout import layout_backend
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.page_pool import PagePool, block_prefix, default_workers, pack, unpack
from pipeline.documents.page_work import Crop, OpenTask, PageTask, PageWork
from pipeline.documents.process import PageDraft, ProcessOptions
from pipeline.documents.results import PageOutput
from pipeline.documents.source import Limits
from pipeline.documents_api import DocumentProcessor
from pipeline.engine.images import ImageSettings, model_image
from tests.documents.samples import CORPUS, ENCRYPTED_PASSWORD

pytestmark = pytest.mark.slow  # spawns page-worker processes

CORPUS_FILES = sorted(CORPUS.glob("*.pdf"))


def _settings(model: Path | str, tmp_path: Path, **overrides: object) -> Settings:
    values = {"model": str(model), "layout": "pdf", "text_layer": "off", "dpi": 72, "max_tokens": 6, "dtype": "float32",
              "cache_dir": tmp_path / "cache"}
    return Settings(**(values | overrides))


def _results(processor: DocumentProcessor, paths: list[Path]) -> dict[int, tuple[dict, str]]:
    """Each document's JSON and Markdown, by position, without what depends on the clock: the timings, and the
    prompt tokens found in the prefix cache (two equal crops share it when they meet the engine in different steps,
    not in the same one)."""
    return {position: (_timeless(document_json(document)), document_markdown(document))
            for position, document in processor.process_many(paths)}


def _timeless(value: object) -> object:
    if isinstance(value, dict):
        return {key: _timeless(item) for key, item in value.items() if key not in ("timings_ms", "cached")}
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value


def test_the_pool_gives_the_single_process_path_s_json_and_markdown_for_every_page_of_the_corpus(
        tiny_checkpoint: Path, tmp_path: Path):
    settings = _settings(tiny_checkpoint, tmp_path)
    with DocumentProcessor(settings, password=ENCRYPTED_PASSWORD, workers=0) as inline:
        expected = _results(inline, CORPUS_FILES)
    with DocumentProcessor(settings, password=ENCRYPTED_PASSWORD, workers=2) as pooled:
        assert pooled._image_settings() is not None  # the workers cut the crops to the model's grid
        found = _results(pooled, CORPUS_FILES)
    assert sorted(found) == list(range(len(CORPUS_FILES)))
    assert found == expected
    model_regions = [region for json_, _ in found.values() for page in json_["pages"] for region in page["regions"]
                     if region["source"] == "model"]
    assert len(model_regions) > 10  # the engine read regions of many pages, not just the text layer


def test_page_images_from_the_workers_are_the_single_process_path_s(tmp_path: Path):
    settings = _settings("none", tmp_path)
    seen: dict[str, list[bytes]] = {"inline": [], "pool": []}
    for label, workers in (("inline", 0), ("pool", 1)):
        with DocumentProcessor(settings, workers=workers, page_images=True) as processor:
            for _ in processor.process_many([CORPUS / "multicolumn.pdf"],
                                            lambda _, done, label=label: seen[label].append(done.images)):
                pass
    assert len(seen["pool"]) == 3 and seen["pool"] == seen["inline"]


def test_a_worker_that_dies_fails_the_task_it_held_and_is_replaced():
    answers: SimpleQueue = SimpleQueue()
    options = ProcessOptions(Limits(dpi=600))  # a page takes a worker long enough to be killed under it
    with PagePool(PageLayout(), options, workers=1) as pool:
        pool.connect(answers.put)
        pool.send(OpenTask(0, CORPUS / "multicolumn.pdf"))
        opened = answers.get(timeout=60)
        pool.send(PageTask(0, CORPUS / "multicolumn.pdf", 0, opened.sha256, None))
        dead = pool._workers[0].process.pid
        os.kill(dead, signal.SIGKILL)
        lost = answers.get(timeout=60)
        assert lost.draft.output.status == "failed" and lost.draft.output.error.code == "corrupt"
        assert "worker" in lost.draft.output.error.message
        pool.send(PageTask(0, CORPUS / "multicolumn.pdf", 1, opened.sha256, None))
        after = answers.get(timeout=60)
        assert after.draft.output.index == 1 and after.draft.output.status == "succeeded"
        assert pool._workers[0].process.pid != dead


def test_documents_go_on_when_a_worker_dies_under_one(tmp_path: Path):
    with DocumentProcessor(_settings("none", tmp_path, dpi=300), workers=1) as processor:
        killed: list[int] = []

        def kill_the_worker(position: int, _: object) -> None:
            if not killed:
                killed.append(processor._pool._workers[0].process.pid)
                os.kill(killed[0], signal.SIGKILL)

        results = dict(processor.process_many([CORPUS / "pdflatex-4-pages.pdf", CORPUS / "multicolumn.pdf"],
                                              kill_the_worker))
    pages = results[0].pages
    assert len(pages) == 4 and pages[0].status == "succeeded"
    assert all(page.error.code == "corrupt" for page in pages if page.status == "failed")
    assert [page.status for page in results[1].pages] == ["succeeded"] * 3  # read by the worker that replaced it


def test_pixels_cross_in_shared_memory_that_is_gone_once_read():
    crop = Image.effect_noise((90, 30), 60).convert("RGB")
    settings = ImageSettings(min_pixels=28 * 28, max_pixels=28 * 28 * 16)
    work = PageWork(3, PageDraft(PageOutput(0, "succeeded")), [Crop(0, "ocr", model_image(crop, settings)),
                                                                 Crop(1, "table", crop), Crop(2, "ocr", None)])
    packed = pack(work, os.getpid())
    assert packed.block is not None and not any(isinstance(c.pixels, np.ndarray | Image.Image)
                                                for c in packed.message.crops)
    assert _blocks_of_this_process() == [packed.block]
    back = unpack(packed)
    assert _blocks_of_this_process() == []
    assert np.array_equal(back.crops[0].pixels.patches, work.crops[0].pixels.patches)
    assert back.crops[0].pixels.grid == work.crops[0].pixels.grid
    assert back.crops[1].pixels.tobytes() == crop.tobytes() and back.crops[2].pixels is None


def test_a_run_leaves_no_shared_memory_behind(tiny_checkpoint: Path, tmp_path: Path):
    with DocumentProcessor(_settings(tiny_checkpoint, tmp_path), workers=1) as processor:
        outputs = list(processor.process_many([CORPUS / "multicolumn.pdf"]))
    assert outputs and _blocks_of_this_process() == []


def _blocks_of_this_process() -> list[str]:
    """Shared blocks named for this process's pools: other processes (a second test worker) have their own."""
    return [name for name in os.listdir("/dev/shm") if name.startswith(block_prefix(os.getpid()))]


def test_workers_load_no_torch(tmp_path: Path):
    with PagePool(layout_backend("pdf"), ProcessOptions(), workers=1) as pool:
        pool.connect(lambda result: None)
        maps = Path(f"/proc/{pool._workers[0].process.pid}/maps")
        _wait_for_imports(pool)
        assert "libtorch" not in maps.read_text()


def _wait_for_imports(pool: PagePool) -> None:
    """Send one task and wait for its answer: by then the worker has imported all it will."""
    answers: SimpleQueue = SimpleQueue()
    pool.connect(answers.put)
    pool.send(OpenTask(0, CORPUS / "minimal-document.pdf"))
    assert answers.get(timeout=60).page_count == 1


def test_the_pool_opens_files_only():
    with PagePool(PageLayout(), ProcessOptions(), workers=1) as pool, pytest.raises(TypeError, match="files"):
        pool.send(OpenTask(0, b"%PDF-"))


def test_workers_default_to_the_cores_less_one_beside_a_cpu_engine():
    cores = len(os.sched_getaffinity(0))
    assert default_workers(engine_on_cpu=False) == cores
    assert default_workers(engine_on_cpu=True) == max(1, cores - 1)


def test_a_processor_left_in_the_middle_of_a_run_serves_the_next_one_whole(tmp_path: Path):
    with DocumentProcessor(_settings("none", tmp_path, dpi=150), workers=2) as processor:
        run = processor.process_many([CORPUS / "pdflatex-4-pages.pdf", CORPUS / "multicolumn.pdf",
                                      CORPUS / "google-doc-document.pdf"])
        next(run)
        run.close()  # the workers still hold tasks of the run left behind; their results must not reach the next
        results = dict(processor.process_many([CORPUS / "minimal-document.pdf", CORPUS / "multicolumn.pdf"]))
    assert [results[0].name, results[1].name] == ["minimal-document.pdf", "multicolumn.pdf"]
    assert [len(results[0].pages), len(results[1].pages)] == [1, 3]
    assert {page.status for result in results.values() for page in result.pages} == {"succeeded"}
