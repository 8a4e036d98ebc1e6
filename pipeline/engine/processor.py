"""Turns (images, prompt) into model inputs exactly as the checkpoint's own processor does.

Preprocessing follows the checkpoint's preprocessor_config.json (not transformers' class defaults), the
prompt is rendered from the checkpoint's chat_template.jinja, and each image placeholder is expanded to
grid_h·grid_w/4 tokens. Bad images are refused here with a stable error code before they reach a worker's
model.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jinja2 import TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from PIL import Image

from .images import ImageSettings, ModelImage, load_image, model_image, normalization_table
from .model.checkpoint_config import FETCH_AGAIN, read_json
from .model.errors import CheckpointError
from .model.rope import Grid
from .prompts import PROMPT_TASKS


def preprocess_image(image: Image.Image, settings: ImageSettings) -> tuple[torch.Tensor, Grid]:
    """Resize, normalise and cut into raster-order patches → ((gh·gw, 3, p, p) float32, (1, gh, gw))."""
    resized = model_image(image, settings)
    return normalize(torch.from_numpy(resized.patches), normalization(settings)), resized.grid


def normalization(settings: ImageSettings) -> torch.Tensor:
    """The (3, 256) table that turns each channel's byte into the model's input value (images.normalization_table)."""
    return torch.from_numpy(normalization_table(settings.rescale_factor, tuple(settings.mean), tuple(settings.std)))


def normalize(patches: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """uint8 patches (N, 3, p, p) → float32 model input, by lookup in `table` on the patches' device: the same bits
    as transformers' rescale-and-normalise, so the engine can send bytes to the GPU and normalise there."""
    channels = torch.arange(3, device=patches.device).view(1, 3, 1, 1)
    return table.to(patches.device)[channels, patches.long()]


@dataclass
class Prompt:
    """A tokenised prompt ready for the engine: ids with placeholders expanded, and its images as uint8 patches
    (`patches`), normalised by `table` where the model runs (`pixel_values` normalises them here, for callers that
    want the model's input itself)."""

    input_ids: list[int]
    patches: torch.Tensor | None = None
    grids: list[Grid] = field(default_factory=list)
    table: torch.Tensor | None = None

    @property
    def patch_counts(self) -> list[int]:
        return [t * h * w for t, h, w in self.grids]

    @property
    def pixel_values(self) -> torch.Tensor | None:
        return None if self.patches is None else normalize(self.patches, self.table)


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wrap a plain-string content as one text part: the template iterates content as typed parts."""
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m.get("content"), str) else m
        for m in messages
    ]


class Processor:
    """Tokenizer + chat template + image preprocessing of one checkpoint directory."""

    def __init__(self, tokenizer: Any, template: str, settings: ImageSettings, image_token_id: int) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.image_token_id = image_token_id
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        self.template = env.from_string(template)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **image_overrides: Any) -> Processor:
        """The checkpoint's processor; CheckpointError names the file that is missing or broken and the fix."""
        directory = Path(directory)
        config = read_json(directory / "config.json", "config")
        settings = ImageSettings.from_file(directory / "preprocessor_config.json", **image_overrides)
        template = _chat_template(directory)
        return cls(_tokenizer(directory), template, settings, config.get("image_token_id", 100295))

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        special = {k: v for k, v in self.tokenizer.special_tokens_map.items() if isinstance(v, str)}
        return self.template.render(
            messages=normalize_messages(messages), add_generation_prompt=add_generation_prompt, **special)

    def encode_messages(self, messages: list[dict[str, Any]]) -> Prompt:
        """Render and tokenise chat messages; image parts carry a PIL image (or bytes/path, or a ModelImage already
        cut to the model's grid) under "image"."""
        parts = [part for m in normalize_messages(messages) for part in m["content"]]
        images = [part["image"] for part in parts if part.get("type") == "image"]
        text = "".join(part.get("text", "") for part in parts if part.get("type") == "text").strip()
        ids = self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"]
        return self._with_images(ids, images, self.settings.for_task(PROMPT_TASKS.get(text)))

    def encode(self, prompt: str, images: list[Any] | None = None) -> Prompt:
        """One user turn: the images first, then the text (a task prompt such as `OCR:`). The rendered ids depend
        only on the text and the number of images, so they are tokenised once per pair (every region of a document
        asks for one of a handful of task prompts)."""
        images = images or []
        ids = self._turn_ids(prompt, len(images))
        return self._with_images(list(ids), images, self.settings.for_task(PROMPT_TASKS.get(prompt.strip())))

    @functools.lru_cache(maxsize=64)  # noqa: B019  # one Processor per engine, living as long as it
    def _turn_ids(self, prompt: str, images: int) -> tuple[int, ...]:
        parts = [{"type": "image", "image": None}] * images + [{"type": "text", "text": prompt}]
        rendered = self.render([{"role": "user", "content": parts}])
        return tuple(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])

    @property
    def table(self) -> torch.Tensor:
        """The normalisation table of this checkpoint's images (the same for every task)."""
        return normalization(self.settings)

    def _with_images(self, ids: list[int], images: list[Any], settings: ImageSettings | None = None) -> Prompt:
        settings = settings or self.settings
        placeholders = sum(1 for i in ids if i == self.image_token_id)
        if placeholders != len(images):
            raise ValueError(f"prompt has {placeholders} image placeholders for {len(images)} images")
        if not images:
            return Prompt(list(ids))
        resized = [self._model_image(image, settings) for image in images]
        grids = [image.grid for image in resized]
        merge = settings.merge_size ** 2
        expanded: list[int] = []
        counts = iter(t * h * w // merge for t, h, w in grids)
        for token in ids:
            expanded.extend([token] * next(counts) if token == self.image_token_id else [token])
        patches = torch.from_numpy(resized[0].patches if len(resized) == 1 else
                                   np.concatenate([image.patches for image in resized]))
        return Prompt(expanded, patches, grids, self.table)

    @staticmethod
    def _model_image(image: Any, settings: ImageSettings) -> ModelImage:
        """The image cut to the model's grid: done here, or already by a page worker (a ModelImage, checked)."""
        if not isinstance(image, ModelImage):
            return model_image(load_image(image, settings.max_image_pixels), settings)
        if image.patches.dtype != np.uint8 or image.patch_size != settings.patch_size:
            raise ValueError(f"a ModelImage of {image.patch_size}-pixel {image.patches.dtype} patches; this checkpoint "
                             f"takes {settings.patch_size}-pixel uint8 patches")
        return image

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def _tokenizer(directory: Path) -> Any:
    path = directory / "tokenizer.json"
    if not path.exists() and not (directory / "tokenizer.model").exists():
        raise CheckpointError(f"{path}: not found (nor tokenizer.model). {FETCH_AGAIN}", "no_tokenizer")
    try:
        return _tokenizer_class(directory).from_pretrained(str(directory))
    except Exception as exc:  # transformers and tokenizers raise many types for one cause: files it cannot use
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CheckpointError(f"{path}: the tokenizer does not load ({reason}). {FETCH_AGAIN}",
                              "bad_tokenizer") from exc


def _tokenizer_class(directory: Path) -> Any:
    """The class tokenizer_config.json names, imported by name from transformers' top level, which imports that
    class's module alone. AutoTokenizer would read config.json through AutoConfig first, and that imports the
    model zoo's registry and this model's transformers config (a second of start-up, and a warning about its
    rope keys) to find what the file already says; it stays the fallback for a file that names no class."""
    import transformers

    config = directory / "tokenizer_config.json"
    try:
        name = json.loads(config.read_text()).get("tokenizer_class") if config.exists() else None
    except (OSError, ValueError, AttributeError):
        name = None
    found = getattr(transformers, name, None) if isinstance(name, str) else None
    return found if found is not None else transformers.AutoTokenizer


def _chat_template(directory: Path) -> str:
    """The checkpoint's template, from chat_template.jinja or the JSON files older checkpoints keep it in."""
    path = directory / "chat_template.jinja"
    template = path.read_text() if path.exists() else None
    for name in ("chat_template.json", "tokenizer_config.json"):
        if template is None and (directory / name).exists():
            path = directory / name
            template = read_json(path, "chat_template").get("chat_template")
    if not template:
        raise CheckpointError(f"{directory / 'chat_template.jinja'}: not found, and neither chat_template.json nor "
                              f"tokenizer_config.json holds a chat_template. {FETCH_AGAIN}", "no_chat_template")
    try:
        ImmutableSandboxedEnvironment().parse(template)
    except TemplateSyntaxError as exc:
        raise CheckpointError(f"{path}: the chat template does not parse (line {exc.lineno}: {exc.message}). "
                              f"{FETCH_AGAIN}", "bad_chat_template") from exc
    return template
