"""Each PaddleOCR-VL version's files, as the tiny-checkpoint writer lays them out.

The versions share one architecture (the tensors are the same); what differs is config.json's layout, the
preprocessor's pixel limits and the chat template, and Quire must read each the way transformers does. v1's files are
the hub's (flat remote-code-era config, chat_template.jinja). `1.0-remote-code` is v1 as first published: the older
template that takes `{{ image_token }}` as a variable and ends the prompt with "Assistant: " (transformers passes the
tokenizer's image_token, the bare placeholder, so IMAGE_START/END are not rendered). 1.5 and 1.6 take the 1.5 model
card's pixel limits; their config is written as transformers 5 saves it (nested text_config and vision_config) and
1.6 ships its template as chat_template.json, so every layout a checkpoint of the family comes in is covered.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pipeline.engine.model.checkpoint_config import ModelConfig

VERSIONS = ("1.0", "1.0-remote-code", "1.5", "1.6")


def preprocessor(min_pixels: int, max_pixels: int) -> dict[str, Any]:
    return {
        "image_processor_type": "PaddleOCRVLImageProcessor",
        "processor_class": "PaddleOCRVLProcessor",
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "min_pixels": min_pixels, "max_pixels": max_pixels,
        "merge_size": 2, "patch_size": 14, "temporal_patch_size": 1,
        "resample": 3, "rescale_factor": 1 / 255,
    }


CHAT_TEMPLATE = """{%- if not add_generation_prompt is defined -%}
    {%- set add_generation_prompt = true -%}
{%- endif -%}
{%- if not cls_token is defined -%}
    {%- set cls_token = "<|begin_of_sentence|>" -%}
{%- endif -%}
{%- if not eos_token is defined -%}
    {%- set eos_token = "</s>" -%}
{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
    {%- if message["role"] == "user" -%}
        {{- "User: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "image" -%}
                {{ "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" }}
            {%- endif -%}
        {%- endfor -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ "\\n" -}}
    {%- elif message["role"] == "assistant" -%}
        {{- "Assistant:\\n" -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ eos_token -}}
    {%- elif message["role"] == "system" -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] + "\\n" }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "Assistant:\\n" -}}
{%- endif -%}
"""

# v1 as first published (also the layout candle and transformers' unit-test ids follow)
IMAGE_TOKEN_TEMPLATE = """{%- if not add_generation_prompt is defined -%}
    {%- set add_generation_prompt = true -%}
{%- endif -%}
{%- if not cls_token is defined -%}
    {%- set cls_token = "<|begin_of_sentence|>" -%}
{%- endif -%}
{%- if not sep_token is defined -%}
    {%- set sep_token = "<|end_of_sentence|>" -%}
{%- endif -%}
{%- if not image_token is defined -%}
    {%- set image_token = "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" -%}
{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
    {%- if message["role"] == "user" -%}
        {{- "User: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "image" -%}
                {{ image_token }}
            {%- endif -%}
        {%- endfor -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ "\\n" -}}
    {%- elif message["role"] == "assistant" -%}
        {{- "Assistant: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ sep_token -}}
    {%- elif message["role"] == "system" -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] + "\\n" }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "Assistant: " -}}
{%- endif -%}
"""


@dataclass(frozen=True)
class VersionFiles:
    nested_config: bool  # transformers 5's text_config / vision_config, else the hub's flat v1 layout
    min_pixels: int
    max_pixels: int
    template: str
    template_file: str  # chat_template.jinja or chat_template.json (transformers' processors read no other)


FILES = {
    "1.0": VersionFiles(False, 147384, 2822400, CHAT_TEMPLATE, "chat_template.jinja"),
    "1.0-remote-code": VersionFiles(False, 147384, 2822400, IMAGE_TOKEN_TEMPLATE, "chat_template.jinja"),
    "1.5": VersionFiles(True, 112896, 1003520, CHAT_TEMPLATE, "chat_template.jinja"),
    "1.6": VersionFiles(True, 112896, 1003520, CHAT_TEMPLATE, "chat_template.json"),
}


def version_files(version: str) -> VersionFiles:
    if version not in FILES:
        raise ValueError(f"unknown PaddleOCR-VL version {version!r}: use one of {', '.join(VERSIONS)}")
    return FILES[version]


def write_version_files(out: Path, config: ModelConfig, version: str, tied: bool,
                        min_pixels: int | None = None) -> None:
    """Write config.json, preprocessor_config.json and the chat template file of `version`."""
    files = version_files(version)
    if min_pixels is not None:
        files = replace(files, min_pixels=min_pixels)
    raw = nested_config(config, tied) if files.nested_config else flat_config(config, tied)
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessor(files.min_pixels, files.max_pixels),
                                                             indent=2))
    if files.template_file == "chat_template.json":
        (out / files.template_file).write_text(json.dumps({"chat_template": files.template}, indent=2))
    else:
        (out / files.template_file).write_text(files.template)


def flat_config(config: ModelConfig, tied: bool) -> dict[str, Any]:
    """The hub's v1 config.json: text fields at the top level, vision_config nested (remote-code era)."""
    text = config.text
    return {
        "architectures": ["PaddleOCRVLForConditionalGeneration"],
        "model_type": "paddleocr_vl", "transformers_version": "4.55.0",
        "vocab_size": text.vocab_size, "hidden_size": text.hidden_size, "intermediate_size": text.intermediate_size,
        "num_hidden_layers": text.num_hidden_layers, "num_attention_heads": text.num_attention_heads,
        "num_key_value_heads": text.num_key_value_heads, "head_dim": text.head_dim, "hidden_act": "silu",
        "rms_norm_eps": text.rms_norm_eps, "rope_theta": text.rope_theta,
        "rope_scaling": {"mrope_section": list(text.mrope_section), "rope_type": "default", "type": "default"},
        "rope_is_neox_style": True, "use_3d_rope": True, "use_bias": False, "max_position_embeddings": 131072,
        "tie_word_embeddings": tied, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        **_special_ids(config), "torch_dtype": "float32",
        "vision_config": {**_vision(config), "model_type": "paddleocr_vl"},
    }


def nested_config(config: ModelConfig, tied: bool) -> dict[str, Any]:
    """config.json as transformers 5 saves it; untying takes tie_word_embeddings=False at both levels."""
    text = config.text
    return {
        "architectures": ["PaddleOCRVLForConditionalGeneration"],
        "model_type": "paddleocr_vl", "transformers_version": "5.0.0", "dtype": "float32",
        "tie_word_embeddings": tied, "rope_is_neox_style": True, "use_3d_rope": True, **_special_ids(config),
        "text_config": {
            "model_type": "paddleocr_vl_text", "vocab_size": text.vocab_size, "hidden_size": text.hidden_size,
            "intermediate_size": text.intermediate_size, "num_hidden_layers": text.num_hidden_layers,
            "num_attention_heads": text.num_attention_heads, "num_key_value_heads": text.num_key_value_heads,
            "head_dim": text.head_dim, "hidden_act": "silu", "rms_norm_eps": text.rms_norm_eps, "use_bias": False,
            "max_position_embeddings": 131072, "tie_word_embeddings": tied,
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": text.rope_theta,
                                "mrope_section": list(text.mrope_section)},
        },
        "vision_config": {**_vision(config), "model_type": "paddleocr_vl_vision",
                          "rope_parameters": {"rope_type": "axial", "rope_theta": config.vision.rope_theta}},
    }


def _special_ids(config: ModelConfig) -> dict[str, int]:
    return {"image_token_id": config.image_token_id, "vision_start_token_id": config.vision_start_token_id,
            "vision_end_token_id": config.vision_end_token_id, "video_token_id": 101307}


def _vision(config: ModelConfig) -> dict[str, Any]:
    vision = asdict(config.vision)
    vision.pop("rope_theta")
    return {**vision, "hidden_act": "gelu_pytorch_tanh", "temporal_patch_size": 2, "tokens_per_second": 2,
            "attention_dropout": 0.0}
