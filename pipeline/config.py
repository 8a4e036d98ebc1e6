"""One Settings object for every part of Quire, read from QUIRE_* environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="QUIRE_", env_file=".env", extra="ignore")

    model: str = "PaddlePaddle/PaddleOCR-VL"
    device: str = "cpu"
    dtype: str = "float32"
    max_tokens: int = 1024
    max_image_pixels: int = 100_000_000
    cache_dir: Path = Path.home() / ".cache" / "quire"


def get_settings() -> Settings:
    return Settings()
