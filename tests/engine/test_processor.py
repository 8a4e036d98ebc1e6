"""The processor must hand the model exactly what transformers' PaddleOCRVLProcessor would."""

from __future__ import annotations

import io
import json
import shutil
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from pipeline.engine.images import TASK_IMAGE_SETTINGS, ImageError, ImageSettings, model_image, smart_resize
from pipeline.engine.model.errors import CheckpointError
from pipeline.engine.processor import Processor, normalize, preprocess_image
from pipeline.engine.prompts import TASK_PROMPTS
from pipeline.samples.tiny_checkpoint import TinySpec
from tests.reference import hf_inputs, hf_processor, random_image, user_turn

IMAGES = [("RGB", 100, 60), ("RGBA", 333, 221), ("L", 640, 480), ("RGB", 10, 500), ("RGB", 3000, 2000)]


@pytest.fixture(scope="module")
def processor(tiny_checkpoint) -> Processor:
    return Processor.from_pretrained(tiny_checkpoint)


@pytest.mark.parametrize(("mode", "width", "height"), IMAGES)
def test_pixels_grid_and_ids_are_bit_identical_to_transformers(processor, tiny_checkpoint, mode, width, height):
    image = random_image(width, height, mode)
    ref = hf_inputs(tiny_checkpoint, user_turn("OCR:", [image]))
    ours = processor.encode("OCR:", [image])
    assert torch.equal(ours.pixel_values, ref["pixel_values"])
    assert ours.grids == [tuple(g) for g in ref["image_grid_thw"].tolist()]
    assert ours.input_ids == ref["input_ids"][0].tolist()


def test_normalisation_by_table_equals_rescale_then_normalise_under_any_mean_and_std():
    """Each pixel is looked up by its byte; the arithmetic transformers does (rescale in float64, then (x - mean) /
    std in float32) over the same bytes gives the same bits."""
    settings = ImageSettings(min_pixels=56 * 56, mean=(0.481, 0.458, 0.408), std=(0.269, 0.261, 0.276))
    image = random_image(56, 56, seed=7)
    patches, grid = preprocess_image(image, settings)
    rgb = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float64)).permute(2, 0, 1)
    scaled = (rgb * settings.rescale_factor).float()
    normed = (scaled - torch.tensor(settings.mean)[:, None, None]) / torch.tensor(settings.std)[:, None, None]
    expected = normed.reshape(3, 4, 14, 4, 14).permute(1, 3, 0, 2, 4).reshape(16, 3, 14, 14)
    assert grid == (1, 4, 4) and torch.equal(patches, expected)


def test_two_images_in_one_prompt_match_transformers(processor, tiny_checkpoint):
    images = [random_image(100, 60, seed=1), random_image(300, 120, seed=2)]
    ref = hf_inputs(tiny_checkpoint, user_turn("OCR:", images))
    ours = processor.encode("OCR:", images)
    assert torch.equal(ours.pixel_values, ref["pixel_values"])
    assert ours.input_ids == ref["input_ids"][0].tolist()


def test_each_placeholder_expands_to_a_quarter_of_its_patches(processor):
    prompt = processor.encode("OCR:", [random_image(100, 60)])
    (t, h, w), = prompt.grids
    assert prompt.input_ids.count(processor.image_token_id) == t * h * w // 4


@pytest.mark.parametrize("task", sorted(TASK_PROMPTS))
def test_every_task_prompt_renders_after_the_images(processor, task):
    text = processor.render(user_turn(TASK_PROMPTS[task], [random_image(50, 50)]))
    assert text == ("<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"
                    f"{TASK_PROMPTS[task]}\nAssistant:\n")


def test_plain_string_content_is_wrapped_as_one_text_part(processor):
    wrapped = processor.render([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}])
    assert processor.render([{"role": "user", "content": "Hello"}]) == wrapped
    assert "Hello" in wrapped


def test_smart_resize_rounds_half_to_even_and_respects_limits():
    assert smart_resize(42, 42, 28, 0, 10**9) == (56, 56)  # 1.5 → 2
    assert smart_resize(70, 70, 28, 0, 10**9) == (56, 56)  # 2.5 → 2, not 3
    h, w = smart_resize(4000, 3000, 28, 147384, 2822400)
    assert h * w <= 2822400 and h % 28 == 0 and w % 28 == 0
    h, w = smart_resize(30, 30, 28, 147384, 2822400)
    assert h * w >= 147384


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(("source", "code"), [
    (b"definitely not an image", "undecodable"),
    (_png(random_image(64, 64))[:100], "undecodable"),
    (Image.new("RGB", (0, 10)), "zero_size"),
    (Image.new("RGB", (2, 1000)), "aspect_ratio"),
    (Image.new("L", (20000, 20000)), "too_many_pixels"),
])
def test_bad_images_raise_their_documented_error(processor, source, code):
    with pytest.raises(ImageError) as caught:
        processor.encode("OCR:", [source])
    assert caught.value.code == code


def test_bomb_limit_is_checked_before_decoding(tiny_checkpoint):
    small_limit = Processor.from_pretrained(tiny_checkpoint, max_image_pixels=1000)
    with pytest.raises(ImageError, match="too_many_pixels"):
        small_limit.encode("OCR:", [_png(random_image(64, 64))])


def test_a_huge_encoded_image_is_refused_from_its_header(processor):
    png = _png(Image.new("L", (1, 1)))
    at = png.index(b"IHDR")
    data = (60000).to_bytes(4, "big") * 2 + png[at + 12:at + 17]
    chunk = b"IHDR" + data
    huge = png[:at] + chunk + zlib.crc32(chunk).to_bytes(4, "big") + png[at + 21:]
    with pytest.raises(ImageError) as caught:
        processor.encode("OCR:", [huge])
    assert caught.value.code == "too_many_pixels"


def test_an_image_a_page_worker_cut_to_the_model_s_grid_is_the_same_prompt(processor):
    image = random_image(333, 221)
    cut = model_image(image, processor.settings.for_task("table"))
    from_worker, from_image = processor.encode("Table Recognition:", [cut]), processor.encode("Table Recognition:",
                                                                                              [image])
    assert from_worker.input_ids == from_image.input_ids and from_worker.grids == from_image.grids
    assert from_worker.patches.dtype == torch.uint8 and torch.equal(from_worker.patches, from_image.patches)
    assert torch.equal(from_worker.pixel_values, from_image.pixel_values)


def test_a_model_image_of_another_patch_size_is_refused(processor):
    cut = model_image(random_image(100, 60), ImageSettings(patch_size=16, min_pixels=32 * 32))
    with pytest.raises(ValueError, match="16-pixel"):
        processor.encode("OCR:", [cut])


def test_the_engine_normalises_bytes_to_transformers_values_by_lookup(processor):
    image = random_image(100, 60)
    floats, _ = preprocess_image(image, processor.settings)
    cut = model_image(image, processor.settings)
    assert torch.equal(normalize(torch.from_numpy(cut.patches), processor.table), floats)


def test_the_tokenizer_loads_by_the_class_its_config_names_and_without_one_through_auto(tiny_checkpoint, tmp_path):
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    named = Processor.from_pretrained(tiny_checkpoint).tokenizer
    del config["tokenizer_class"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    auto = Processor.from_pretrained(tmp_path).tokenizer
    text = "<|IMAGE_START|>OCR: <fcel>a<nl>"
    assert named("OCR: " + text)["input_ids"] == auto("OCR: " + text)["input_ids"]


def test_mismatched_images_and_placeholders_are_refused(processor):
    with pytest.raises(ValueError, match="placeholders"):
        processor._with_images([1, 2, 3], [random_image(10, 10)])


def test_spotting_doubles_a_small_image_and_takes_its_larger_pixel_budget_as_transformers_does(checkpoint_factory):
    directory = checkpoint_factory(TinySpec(version="1.5"))
    image = random_image(600, 400)
    doubled = image.resize((1200, 800), Image.Resampling.LANCZOS)
    spotting = TASK_IMAGE_SETTINGS["spotting"]
    size = {"shortest_edge": 112896, "longest_edge": spotting["max_pixels"]}
    ref = hf_processor(directory).image_processor(doubled, size=size, return_tensors="pt")
    processor = Processor.from_pretrained(directory)
    ours = processor.encode(TASK_PROMPTS["spotting"], [image])
    assert ours.grids == [tuple(ref["image_grid_thw"][0].tolist())]
    assert torch.equal(ours.pixel_values, ref["pixel_values"])
    assert processor.encode(TASK_PROMPTS["ocr"], [image]).grids == [(1, 28, 42)]  # 1.5's own max_pixels


def _broken(tiny_checkpoint, tmp_path, name: str, content: str | None):
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    if content is None:
        (tmp_path / name).unlink()
    else:
        (tmp_path / name).write_text(content)
    return tmp_path


@pytest.mark.parametrize(("name", "content", "code"), [
    ("tokenizer.json", '{"version": "1.0", "trunc', "bad_tokenizer"),
    ("preprocessor_config.json", None, "no_preprocessor"),
    ("preprocessor_config.json", "{not json", "bad_preprocessor"),
    ("preprocessor_config.json", '{"min_pixels": "many"}', "bad_preprocessor"),
    ("chat_template.jinja", None, "no_chat_template"),
    ("chat_template.jinja", "{% for m in messages %}{{ m.content }", "bad_chat_template"),
])
def test_a_missing_or_broken_file_is_a_checkpoint_error_naming_it(tiny_checkpoint, tmp_path, name, content, code):
    directory = _broken(tiny_checkpoint, tmp_path, name, content)
    with pytest.raises(CheckpointError, match=rf"{directory / name}: .*quire models pull") as caught:
        Processor.from_pretrained(directory)
    assert caught.value.code == code
