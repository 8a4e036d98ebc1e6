"""A small synthetic document image, so the demo and benchmarks need no files from outside."""

from __future__ import annotations

from PIL import Image, ImageDraw


def sample_image(width: int = 480, height: int = 160, text: str = "Quire: document OCR") -> Image.Image:
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((4, 4, width - 5, height - 5), outline="black", width=2)
    for row in range(3):
        draw.text((16, 20 + row * 40), f"{text} — line {row + 1}", fill="black")
    return image
