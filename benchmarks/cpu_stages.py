"""Can the CPU stages keep a GPU fed? ingest + render + layout(`pdf`) alone, over the sample corpus.

One process, one thread, as one CPU worker runs them: each file's bytes (already in memory, as a worker gets
them from the blob store) are validated and opened, every page is rendered at the configured DPI and laid out
by the model-free `pdf` backend. Recognition is not involved. One pass warms up (imports, font caches) and is
not timed; then `--repeats` passes are. The reference point: 87 ms of preprocessing per page starved an H200
in another server, so ms_per_page must stay well under that per worker.

Last line: one JSON object {"pages_per_s", "ms_per_page", ...} with the per-stage split.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pipeline.config import get_settings
from pipeline.document_settings import process_options
from pipeline.documents.errors import DocumentError
from pipeline.documents.layout_furniture import clear_cache
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.render import render_page_result
from pipeline.documents.source import Limits, ingest

ROOT = Path(__file__).resolve().parent.parent
CORPORA = (ROOT.parent / "shared" / "corpus", ROOT / "tests" / "fixtures" / "corpus")
PASSWORD = "openpassword"  # libreoffice-writer-password.pdf's user password (corpus README)


def one_pass(files: list[bytes], limits: Limits, layout: PdfLayout) -> dict[str, float]:
    """Run every file through the three stages; seconds spent in each, and the pages done."""
    spent = {"ingest": 0.0, "render": 0.0, "layout": 0.0, "pages": 0.0, "regions": 0.0}
    clear_cache()  # each pass meets every document anew, so layout pays for its one look at the whole document
    for data in files:
        start = time.perf_counter()
        try:
            document = ingest(data, limits, password=PASSWORD)
        except DocumentError:
            spent["ingest"] += time.perf_counter() - start
            continue
        spent["ingest"] += time.perf_counter() - start
        with document:
            for source in document.pages():
                start = time.perf_counter()
                result = render_page_result(source)
                rendered = time.perf_counter()
                if result.page is not None:
                    spent["regions"] += len(layout.detect(result.page, source))
                spent["render"] += rendered - start
                spent["layout"] += time.perf_counter() - rendered
                spent["pages"] += 1
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=next((path for path in CORPORA if path.is_dir()), None))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dpi", type=int, default=None, help="default: QUIRE_DPI, else 200")
    args = parser.parse_args()
    paths = sorted(args.corpus.glob("*.pdf"))
    files = [path.read_bytes() for path in paths]
    settings = get_settings()
    limits = process_options(settings.model_copy(update={"dpi": args.dpi or settings.dpi})).limits  # as a worker's
    layout = PdfLayout()
    one_pass(files, limits, layout)
    totals = {key: 0.0 for key in ("ingest", "render", "layout", "pages", "regions")}
    for _ in range(args.repeats):
        for key, value in one_pass(files, limits, layout).items():
            totals[key] += value
    pages = totals["pages"]
    seconds = totals["ingest"] + totals["render"] + totals["layout"]
    print(f"{len(paths)} files, {int(pages / args.repeats)} pages per pass, {args.repeats} timed passes, "
          f"dpi {limits.dpi}, corpus {args.corpus}")
    print(json.dumps({
        "pages_per_s": round(pages / seconds, 2),
        "ms_per_page": round(1000 * seconds / pages, 2),
        "ingest_ms_per_page": round(1000 * totals["ingest"] / pages, 2),
        "render_ms_per_page": round(1000 * totals["render"] / pages, 2),
        "layout_ms_per_page": round(1000 * totals["layout"] / pages, 2),
        "regions_per_page": round(totals["regions"] / pages, 2),
        "pages": int(pages),
        "dpi": limits.dpi,
        "threads": 1,
    }))


if __name__ == "__main__":
    main()
