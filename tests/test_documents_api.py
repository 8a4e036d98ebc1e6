"""`from pipeline import process`: a document in (a path or its bytes), its result out, in one call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from pipeline import process
from pipeline.documents.assemble import load_schema
from tests.documents.samples import corpus_bytes

pytestmark = pytest.mark.slow  # whole documents through the engine, some in subprocesses

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
TEXT_ONLY = CORPUS / "pdflatex-4-pages.pdf"


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings' cache directory (where a loaded model's revision is kept) in the test's own folder."""
    monkeypatch.setenv("QUIRE_CACHE_DIR", str(tmp_path))


def test_a_path_comes_back_as_its_result():
    result = process(TEXT_ONLY, layout="pdf", model="none")
    assert (result.name, result.status, len(result.pages)) == ("pdflatex-4-pages.pdf", "succeeded", 4)
    assert result.pages[0].regions[0].content.text.startswith("Hello, here is some text")


def test_the_result_has_what_name_json_has_its_markdown_included():
    result = process(TEXT_ONLY, layout="pdf", model="none")
    as_json = result.to_json()
    jsonschema.validate(as_json, load_schema())
    assert [page.markdown for page in result.pages] == [page["markdown"] for page in as_json["pages"]]
    assert result.pages[0].markdown.startswith("Hello, here is some text")
    assert result.markdown == "\n\n".join(page.markdown for page in result.pages) + "\n"  # NAME.md


def test_bytes_come_back_as_their_result_under_the_name_given():
    result = process(corpus_bytes("minimal-document.pdf"), name="letter.pdf", layout="pdf", model="none")
    assert (result.name, result.status, len(result.pages)) == ("letter.pdf", "succeeded", 1)


def test_bad_input_is_a_failed_result_not_an_exception():
    result = process(b"<html>not a document</html>", model="none")
    assert (result.status, result.error.code) == ("failed", "unsupported_format")


def test_the_engine_is_built_from_the_settings_only_when_a_region_needs_it(tiny_checkpoint: Path):
    text_only = process(TEXT_ONLY, layout="pdf", model=str(tiny_checkpoint), pages="1")
    assert text_only.model_revision is None  # the text layer served it all: no engine was loaded
    scanned = process(TEXT_ONLY, layout="page", text_layer="off", model=str(tiny_checkpoint), max_tokens=2,
                      pages="1")
    region = scanned.pages[0].regions[0]
    assert region.source == "model" and 1 <= region.usage.generated_tokens <= 2
    assert scanned.model == str(tiny_checkpoint) and scanned.model_revision


def test_an_engine_given_is_used_and_left_open_for_the_caller(tiny_checkpoint: Path):
    from pipeline.engine.engine import Engine

    engine = Engine.from_pretrained(tiny_checkpoint)
    try:
        for _ in range(2):
            result = process(TEXT_ONLY, engine=engine, layout="page", text_layer="off", max_tokens=2, pages="1")
            assert result.pages[0].regions[0].source == "model"
    finally:
        engine.close()


def test_a_keyword_that_is_no_setting_is_refused():
    with pytest.raises(TypeError, match="not a setting: dpis"):
        process(TEXT_ONLY, dpis=100)


def test_the_pdf_layout_with_a_model_imports_the_tokenizer_not_transformers_model_zoo(tiny_checkpoint: Path):
    """`process` with the `pdf` layout and a model: the tokenizer, not transformers' model zoo, and no module of
    torch.distributed, FSDP or dynamo beyond those `import torch` itself brings."""
    script = f"""
import json, sys
import torch
base = set(sys.modules)
from pipeline import process
result = process({str(TEXT_ONLY)!r}, layout="pdf", model={str(tiny_checkpoint)!r},
                 text_layer="off", max_tokens=2, pages="1")
added = set(sys.modules) - base
print(json.dumps({{"status": result.status, "source": result.pages[0].regions[0].source,
                  "added": sorted(m for m in added if m.startswith(("transformers.models", "torch.distributed",
                                                                    "torch._dynamo")))}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"QUIRE_CACHE_DIR": str(tiny_checkpoint.parent / "startup-cache")})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert (found["status"], found["source"]) == ("succeeded", "model")
    assert found["added"] == []
    assert "Unrecognized keys" not in done.stderr  # transformers' config of the model was never built
