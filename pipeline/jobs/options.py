"""A document's processing options as a client gives them, and as the workers read them.

Options are resolved against Settings when the document is accepted and stored resolved, so a queued document
is processed the way it was asked for even if the service's defaults change meanwhile, and two uploads that
differ only by spelling out a default count as the same request for deduplication.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import DPI_MAX, DPI_MIN, Settings
from pipeline.document_settings import process_options
from pipeline.documents.process import ProcessOptions
from pipeline.engine.prompts import RegionTask

LayoutName = Literal["auto", "pp-doclayout", "pdf", "page"]


class DocumentOptions(BaseModel):
    """What a client may choose per document; None means "the service's default" until resolved."""

    model_config = ConfigDict(extra="forbid")

    layout: LayoutName | None = None
    dpi: int | None = Field(default=None, ge=DPI_MIN, le=DPI_MAX)
    tasks: list[RegionTask] | None = Field(default=None, min_length=1)  # region kinds to recognise; others are pictures
    text_layer: Literal["auto", "off"] | None = None
    password: str | None = Field(default=None, max_length=1024)  # kept until the document is finished
    callback_url: str | None = Field(default=None, max_length=2048)

    def resolved(self, settings: Settings) -> DocumentOptions:
        """Every default filled in from settings; tasks sorted, so equal requests compare equal."""
        tasks = self.tasks or default_tasks(settings)
        return self.model_copy(update={
            "layout": self.layout or settings.layout,
            "dpi": self.dpi or settings.dpi,
            "tasks": sorted(set(tasks)),
            "text_layer": self.text_layer or settings.text_layer,
        })

    def for_pipeline(self, settings: Settings) -> ProcessOptions:
        """The pipeline's options for a resolved document: this document's choices in place of the settings'."""
        chosen = settings.model_copy(update=self.model_dump(include={"dpi", "text_layer"}, exclude_none=True))
        return process_options(chosen, tasks=self.tasks or default_tasks(settings), password=self.password)

    def dedup_key(self, tenant: str, sha256: str, batch_id: str | None = None) -> str:
        """Same tenant, same bytes and same (resolved) options → the same key; where results go is not part of it.
        A batch's documents have keys of their own (`batch_id`): they repeat each other, never outside documents."""
        request = self.model_dump(exclude={"callback_url"})
        scope = [tenant, sha256, request] + ([batch_id] if batch_id is not None else [])
        canonical = json.dumps(scope, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def default_tasks(settings: Settings) -> list[RegionTask]:
    tasks: list[RegionTask] = ["ocr", "table", "formula"]
    return tasks + (["chart"] if settings.recognize_charts else []) + (["seal"] if settings.recognize_seals else [])
