"""benchmarks/pages.py: pages per second as a user gets them, every field of its JSON, on a smoke run."""

from __future__ import annotations

import json

import pytest

from benchmarks import pages
from benchmarks.pages_budgets import MIN_BUDGET, region_budgets
from pipeline.config import Settings
from pipeline.document_settings import process_options
from pipeline.documents.layout import layout_backend
from pipeline.engine.processor import Processor

FIELDS = {"pages", "regions", "model_regions", "output_tokens", "wall_s", "pages_per_s", "output_tok_s",
          "engine_busy_share", "mean_running_seqs", "max_num_seqs", "engine_alone_s", "pipeline_efficiency",
          "first_page_s", "import_s", "workers", "layout", "text_layer", "device", "dtype"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("pages") / "pages.json"
    assert pages.main(["--small", "--service", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_small_run_reports_every_field(small: dict):
    assert FIELDS <= set(small)
    assert (small["documents"], small["pages"], small["failed_documents"]) == (2, 4, 0)
    assert small["model_regions"] == small["regions"] == 12  # the text layer is off: every region is the model's
    assert small["output_tokens"] >= MIN_BUDGET * small["model_regions"]
    assert small["pages_per_s"] == pytest.approx(small["pages"] / small["wall_s"], rel=0.01)
    assert small["output_tok_s"] == pytest.approx(small["output_tokens"] / small["wall_s"], rel=0.01)
    assert 0 < small["engine_busy_share"] <= 1 and 0 < small["first_page_s"] <= small["wall_s"]
    assert 1 <= small["mean_running_seqs"] <= small["max_num_seqs"]
    assert small["pipeline_efficiency"] == pytest.approx(small["engine_alone_s"] / small["wall_s"], rel=0.01)


def test_the_service_runs_the_same_corpus_beside_process(small: dict):
    service = small["service"]
    assert service["service_pages"] == small["pages"]
    assert service["service_pages_per_s"] > 0 and service["process_pages_per_s"] > 0
    assert service["service_over_process"] == pytest.approx(
        service["service_pages_per_s"] / service["process_pages_per_s"], rel=0.01)


def test_each_region_s_budget_is_its_text_layer_s_token_count(tmp_path, tiny_checkpoint):
    from benchmarks.workload import generated_pdf

    path = tmp_path / "doc.pdf"
    path.write_bytes(generated_pdf("budget test", pages=2))
    settings = Settings(layout="pdf", text_layer="off", dpi=72)
    tokenizer = Processor.from_pretrained(tiny_checkpoint).tokenizer
    budgets = region_budgets([path], layout_backend("pdf"), process_options(settings), tokenizer, fixed=99)
    assert sorted(budgets) == [f"doc.pdf#p{page}r{order}" for page in (1, 2) for order in range(3)]
    text = "budget test page 1 paragraph 1\nchecksum"
    assert budgets["doc.pdf#p1r0"] >= len(tokenizer(text, add_special_tokens=False)["input_ids"]) > MIN_BUDGET


def test_pairs_change_one_option_and_keep_the_rest():
    assert pages._without(["--workers", "1", "--pairs", "3", "--against=workers=2", "--small"],
                          ("--pairs", "--against")) == ["--workers", "1", "--small"]
