"""Write a processed document as files: NAME.md, NAME.json and NAME.pages/ (page images, overlays, pictures).

Page images are written as each page finishes (as PNGs encoded where the page was laid out: FinishedPage.images),
the Markdown and JSON at the end, the JSON last and by rename: its presence means the document is done, which is
how a rerun over a directory knows what to skip.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from pipeline.documents.assemble import MarkdownOptions, document_json, document_markdown
from pipeline.documents.process import FinishedPage
from pipeline.documents.results import DocumentOutput


def output_names(inputs: list[Path], found_in: Mapping[Path, Path] | None = None) -> dict[Path, str]:
    """NAME for each input: its stem, or its whole file name where two inputs share a stem (a.pdf and a.png); an
    input a directory scan found below that directory (`found_in`) keeps its place under it (sub/a)."""
    found_in = found_in or {}

    def folder(path: Path) -> Path:
        return path.parent.relative_to(found_in[path]) if path in found_in else Path()

    stems = Counter(folder(path) / path.stem for path in inputs)
    return {path: (folder(path) / (path.stem if stems[folder(path) / path.stem] == 1 else path.name)).as_posix()
            for path in inputs}


class DocumentWriter:
    """Files for one document under `directory`, named `name`; call `page` per finished page, then `finish`."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = directory, name
        self.pages_dir = directory / f"{name}.pages"
        self.pictures: dict[tuple[int, int], str] = {}
        self.page_files: list[dict[str, object]] = []

    @property
    def json_path(self) -> Path:
        return self.directory / f"{self.name}.json"

    @property
    def markdown_path(self) -> Path:
        return self.directory / f"{self.name}.md"

    def start(self) -> None:
        """Clear what an earlier run left for this name, so no stale page image outlives a rerun."""
        self.json_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.pages_dir, ignore_errors=True)
        self.json_path.unlink(missing_ok=True)
        self.markdown_path.unlink(missing_ok=True)

    def page(self, finished: FinishedPage) -> None:
        """Save the page image, its overlay and the crops of its picture regions (FinishedPage.images)."""
        images = finished.images
        if images is None:
            return
        self.pages_dir.mkdir(parents=True, exist_ok=True)
        stem = f"page-{finished.output.index + 1:04d}"
        (self.pages_dir / f"{stem}.png").write_bytes(images.page)
        (self.pages_dir / f"{stem}.overlay.png").write_bytes(images.overlay)
        self.page_files.append({"page": finished.output.index + 1, "image": self._relative(f"{stem}.png"),
                                "overlay": self._relative(f"{stem}.overlay.png")})
        for order, picture in images.pictures.items():
            file = f"{stem}-region-{order:03d}.png"
            (self.pages_dir / file).write_bytes(picture)
            self.pictures[(finished.output.index, order)] = quote(f"{self.pages_dir.name}/{file}")

    def finish(self, document: DocumentOutput) -> None:
        """Write NAME.md (unless the document failed as a whole) and then NAME.json, which lists the files written
        (relative to its own folder, so the folder can move)."""
        options = MarkdownOptions(pictures=self.pictures)
        files: dict[str, object] = {"json": self.json_path.name}
        if document.error is None:
            self.markdown_path.write_text(document_markdown(document, options), encoding="utf-8")
            files["markdown"] = self.markdown_path.name
        files["pages"] = sorted(self.page_files, key=lambda page: page["page"])
        partial = self.json_path.with_suffix(".json.partial")
        body = document_json(document, options) | {"files": files}
        partial.write_text(json.dumps(body, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        partial.replace(self.json_path)

    def _relative(self, file: str) -> str:
        return f"{Path(self.name).name}.pages/{file}"
