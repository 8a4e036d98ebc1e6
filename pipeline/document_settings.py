"""What the settings ask of the document pipeline, in one place: its ProcessOptions.

`quire process`, the library API (documents_api.py), the service's stages (jobs/options.py) and the benchmarks
all take their options from `process_options`, so a document meets the same limits (QUIRE_MAX_PAGES,
QUIRE_MAX_UPLOAD_BYTES), DPI and region choices whichever way it comes in. A caller's own choices (a command's
flags, an upload's options) go into the settings first.
"""

from __future__ import annotations

from collections.abc import Collection

from pipeline.config import Settings
from pipeline.documents.page_ranges import PageRanges
from pipeline.documents.process import ProcessOptions
from pipeline.documents.regions import RegionOptions
from pipeline.documents.source import Limits


def process_options(settings: Settings, *, tasks: Collection[str] | None = None, password: str | None = None,
                    pages: PageRanges | None = None) -> ProcessOptions:
    """The pipeline's options under settings. `tasks`: the region kinds to recognise, the others kept as pictures
    (None: every kind, charts and seals as the settings say); `password` opens an encrypted PDF; `pages`: only
    these pages (None: all)."""
    kinds = None if tasks is None else frozenset(tasks)
    regions = RegionOptions(settings.crop_margin_pt, settings.text_layer,
                            recognize_charts=settings.recognize_charts if kinds is None else "chart" in kinds,
                            recognize_seals=settings.recognize_seals if kinds is None else "seal" in kinds,
                            tasks=kinds)
    limits = Limits(max_file_bytes=settings.max_upload_bytes, max_pages=settings.max_pages, dpi=settings.dpi)
    return ProcessOptions(limits, regions, password, settings.pages_in_flight or ProcessOptions.pages_in_flight,
                          pages=pages)
