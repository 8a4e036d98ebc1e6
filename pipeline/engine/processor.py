"""Turns (images, prompt) into model inputs exactly as the checkpoint's own processor does.

Preprocessing follows the checkpoint's preprocessor_config.json (not transformers' class defaults), the
prompt is rendered from the checkpoint's chat_template.jinja, and each image placeholder is expanded to
grid_h·grid_w/4 tokens. Bad images are refused here with a stable error code before they reach a worker's
model.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jinja2 import TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from PIL import Image, UnidentifiedImageError

from .errors import CheckpointError
from .model.config import FETCH_AGAIN, read_json
from .model.rope import Grid

TASK_PROMPTS = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
    "spotting": "Spotting:",
    "seal": "Seal Recognition:",
}
PROMPT_TASKS = {prompt: task for task, prompt in TASK_PROMPTS.items()}
DEFAULT_MAX_IMAGE_PIXELS = 100_000_000
# PaddleOCR-VL-1.5's model card: spotting reads small text over the whole crop, so it gets a larger pixel budget
# than the checkpoint's other tasks and doubles (LANCZOS) an image whose both sides are under 1500 px.
TASK_IMAGE_SETTINGS: dict[str, dict[str, int]] = {"spotting": {"max_pixels": 2048 * 28 * 28, "upscale_below": 1500}}
MAX_ASPECT_RATIO = 200


class ImageError(ValueError):
    """An image the processor refuses; `code` is stable, the message is for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Nearest (multiple-of-factor) size within the pixel limits; Python's half-to-even round on purpose."""
    if height < factor:
        width, height = round(width * factor / height), factor
    if width < factor:
        height, width = round(height * factor / width), factor
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ImageError("aspect_ratio", f"aspect ratio of {width}x{height} is over {MAX_ASPECT_RATIO}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def load_image(source: Image.Image | bytes | str | Path, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Image.Image:
    """Open and check an image without decoding more than `max_pixels` (a decompression-bomb guard)."""
    if isinstance(source, Image.Image):
        image = source
    else:
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        try:
            image = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:
            raise ImageError("too_many_pixels", str(exc)) from exc
        except UnidentifiedImageError as exc:  # its message is only the BytesIO's repr
            raise ImageError("undecodable", "not an image PIL can read (PNG, JPEG, TIFF, WebP, …)") from exc
        except (OSError, ValueError) as exc:
            raise ImageError("undecodable", f"not a decodable image ({exc})") from exc
    width, height = image.size
    if width == 0 or height == 0:
        raise ImageError("zero_size", f"image has zero size {width}x{height}")
    if width * height > max_pixels:
        raise ImageError("too_many_pixels", f"{width}x{height} is over the limit of {max_pixels} pixels")
    try:
        image.load()
    except (OSError, ValueError) as exc:
        raise ImageError("undecodable", f"image data is truncated or corrupt ({exc})") from exc
    return image


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB as transformers makes it: anything else goes through RGBA and is composited onto white."""
    if image.mode == "RGB":
        return image
    rgba = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255)), rgba).convert("RGB")


@dataclass(frozen=True)
class ImageSettings:
    min_pixels: int = 147384
    max_pixels: int = 2822400
    patch_size: int = 14
    merge_size: int = 2
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    rescale_factor: float = 1 / 255
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    upscale_below: int = 0  # an image whose both sides are shorter is doubled first; 0: never

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> ImageSettings:
        """The checkpoint's own limits (they differ by version: v1 min 147384 / max 2822400, 1.5 112896 / 1003520)."""
        raw = read_json(path, "preprocessor")
        size = raw.get("size") or {}
        values = {
            "min_pixels": raw.get("min_pixels", size.get("shortest_edge", cls.min_pixels)),
            "max_pixels": raw.get("max_pixels", size.get("longest_edge", cls.max_pixels)),
            "patch_size": raw.get("patch_size", cls.patch_size),
            "merge_size": raw.get("merge_size", cls.merge_size),
            "mean": tuple(raw.get("image_mean", cls.mean)),
            "std": tuple(raw.get("image_std", cls.std)),
            "rescale_factor": raw.get("rescale_factor", cls.rescale_factor),
        }
        values.update(overrides)
        settings = cls(**values)
        if not _usable(settings):
            raise CheckpointError(f"{path}: min_pixels {settings.min_pixels}, max_pixels {settings.max_pixels}, "
                                  f"patch_size {settings.patch_size}, merge_size {settings.merge_size} are not "
                                  f"usable image limits. {FETCH_AGAIN}", "bad_preprocessor")
        return settings

    def for_task(self, task: str | None) -> ImageSettings:
        """These settings as `task` needs them (TASK_IMAGE_SETTINGS); the checkpoint's own for the other tasks."""
        return replace(self, **TASK_IMAGE_SETTINGS.get(task or "", {}))


def _usable(settings: ImageSettings) -> bool:
    try:
        return 0 < settings.min_pixels <= settings.max_pixels and settings.patch_size > 0 and settings.merge_size > 0
    except TypeError:  # a limit given as a string or a list
        return False


def preprocess_image(image: Image.Image, settings: ImageSettings) -> tuple[torch.Tensor, Grid]:
    """Resize, normalise and cut into raster-order patches → ((gh·gw, 3, p, p), (1, gh, gw))."""
    image = to_rgb(image)
    if image.width < settings.upscale_below and image.height < settings.upscale_below:
        image = image.resize((image.width * 2, image.height * 2), Image.Resampling.LANCZOS)
    p = settings.patch_size
    height, width = smart_resize(image.height, image.width, p * settings.merge_size,
                                 settings.min_pixels, settings.max_pixels)
    resized = np.asarray(image.resize((width, height), Image.Resampling.BICUBIC))
    gh, gw = height // p, width // p
    levels = np.ascontiguousarray(resized.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3))
    table = _normalization_table(settings.rescale_factor, tuple(settings.mean), tuple(settings.std))
    patches = np.empty(levels.shape, dtype=np.float32)
    for channel in range(3):
        np.take(table[channel], levels[:, :, channel], out=patches[:, :, channel])
    return torch.from_numpy(patches.reshape(gh * gw, 3, p, p)), (1, gh, gw)


@functools.lru_cache(maxsize=8)
def _normalization_table(rescale_factor: float, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """(3, 256) float32: each channel's normalised value of each byte, computed as transformers does it (rescaled
    in float64, then (x - mean) / std in float32). A pixel's value depends only on its byte and channel, so one
    lookup gives the same bits as the arithmetic over every pixel, which took a region's worth of CPU per crop."""
    scaled = (np.arange(256, dtype=np.float64) * rescale_factor).astype(np.float32)
    return (scaled[None, :] - np.asarray(mean, dtype=np.float32)[:, None]) / np.asarray(std, dtype=np.float32)[:, None]


@dataclass
class Prompt:
    """A tokenised prompt ready for the engine: ids with placeholders expanded, and its images."""

    input_ids: list[int]
    pixel_values: torch.Tensor | None = None
    grids: list[Grid] = field(default_factory=list)

    @property
    def patch_counts(self) -> list[int]:
        return [t * h * w for t, h, w in self.grids]


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
        """Render and tokenise chat messages; image parts carry a PIL image (or bytes/path) under "image"."""
        parts = [part for m in normalize_messages(messages) for part in m["content"]]
        images = [part["image"] for part in parts if part.get("type") == "image"]
        text = "".join(part.get("text", "") for part in parts if part.get("type") == "text").strip()
        ids = self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"]
        return self._with_images(ids, images, self.settings.for_task(PROMPT_TASKS.get(text)))

    def encode(self, prompt: str, images: list[Any] | None = None) -> Prompt:
        """One user turn: the images first, then the text (a task prompt such as `OCR:`)."""
        parts = [{"type": "image", "image": image} for image in images or []] + [{"type": "text", "text": prompt}]
        return self.encode_messages([{"role": "user", "content": parts}])

    def _with_images(self, ids: list[int], images: list[Any], settings: ImageSettings | None = None) -> Prompt:
        settings = settings or self.settings
        placeholders = sum(1 for i in ids if i == self.image_token_id)
        if placeholders != len(images):
            raise ValueError(f"prompt has {placeholders} image placeholders for {len(images)} images")
        if not images:
            return Prompt(list(ids))
        processed = [preprocess_image(load_image(image, settings.max_image_pixels), settings) for image in images]
        grids = [grid for _, grid in processed]
        merge = settings.merge_size ** 2
        expanded: list[int] = []
        counts = iter(t * h * w // merge for t, h, w in grids)
        for token in ids:
            expanded.extend([token] * next(counts) if token == self.image_token_id else [token])
        return Prompt(expanded, torch.cat([patches for patches, _ in processed]), grids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def _tokenizer(directory: Path) -> Any:
    from transformers import AutoTokenizer

    path = directory / "tokenizer.json"
    if not path.exists() and not (directory / "tokenizer.model").exists():
        raise CheckpointError(f"{path}: not found (nor tokenizer.model). {FETCH_AGAIN}", "no_tokenizer")
    try:
        return AutoTokenizer.from_pretrained(str(directory))
    except Exception as exc:  # transformers and tokenizers raise many types for one cause: files it cannot use
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CheckpointError(f"{path}: the tokenizer does not load ({reason}). {FETCH_AGAIN}",
                              "bad_tokenizer") from exc


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
