"""A crop as the model takes it, without torch: the checkpoint's image limits, the resize to the model's grid and
the cut into patches, all on uint8 pixels.

This is the half of preprocessing that costs CPU (decode, RGB, resize), so `quire process` runs it in its page
workers (pipeline/documents/page_pool.py), which import no torch; the engine's process only normalises the bytes,
on the model's device (processor.py's table, the runner). The result equals transformers' processor bit for bit
once normalised (tests/engine/test_processor.py).
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from .model.checkpoint_config import FETCH_AGAIN, read_json
from .model.errors import CheckpointError

Grid = tuple[int, int, int]  # (t, h, w) in patches, as model/rope.py takes it

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


@dataclass(frozen=True)
class ModelImage:
    """An image resized to the model's grid and cut into raster-order patches, still as bytes: (gh·gw, 3, p, p)
    uint8. What a page worker hands the engine in place of a crop: a quarter of the floats' bytes, and nothing left
    to do but normalise."""

    patches: np.ndarray
    grid: Grid

    @property
    def patch_size(self) -> int:
        return int(self.patches.shape[-1])


def model_image(image: Image.Image, settings: ImageSettings) -> ModelImage:
    """RGB, the task's upscale, the smart resize (bicubic) and the cut into patches, as transformers does them."""
    image = to_rgb(image)
    if image.width < settings.upscale_below and image.height < settings.upscale_below:
        image = image.resize((image.width * 2, image.height * 2), Image.Resampling.LANCZOS)
    p = settings.patch_size
    height, width = smart_resize(image.height, image.width, p * settings.merge_size,
                                 settings.min_pixels, settings.max_pixels)
    resized = np.asarray(image.resize((width, height), Image.Resampling.BICUBIC))
    gh, gw = height // p, width // p
    patches = np.ascontiguousarray(resized.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3))
    return ModelImage(patches.reshape(gh * gw, 3, p, p), (1, gh, gw))


@functools.lru_cache(maxsize=8)
def normalization_table(rescale_factor: float, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """(3, 256) float32: each channel's normalised value of each byte, computed as transformers does it (rescaled
    in float64, then (x - mean) / std in float32). A pixel's value depends only on its byte and channel, so one
    lookup gives the same bits as the arithmetic over every pixel, which took a region's worth of CPU per crop."""
    scaled = (np.arange(256, dtype=np.float64) * rescale_factor).astype(np.float32)
    return (scaled[None, :] - np.asarray(mean, dtype=np.float32)[:, None]) / np.asarray(std, dtype=np.float32)[:, None]
