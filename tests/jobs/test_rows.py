"""A region's result crosses the database as its records (results.py's RegionContent and Usage) and comes back as
it went in: through its region row (rows.py) and through the recognition cache (upserts.py)."""

from __future__ import annotations

from dataclasses import asdict, replace

from sqlalchemy import Engine

from pipeline.db.models import Region
from pipeline.db.session import session_scope
from pipeline.db.upserts import CropKey, recall_recognitions, remember_recognitions
from pipeline.documents.results import Problem, RegionContent, RegionOutput, Usage
from pipeline.jobs.rows import from_columns, region_output, region_row

TABLE = RegionContent("<fcel>a<nl>", html="<table><tr><td>a</td></tr></table>", finish_reason="length",
                      truncated=True)
PLACE = RegionOutput(3, "table", 0.75, (10.0, 20.0, 110.0, 70.0), (5.0, 10.0, 55.0, 35.0), "table", "none")


def test_a_region_row_reads_back_as_the_region_it_was_written_from():
    recognized = replace(PLACE, source="model", content=TABLE, usage=Usage(310, 12, 256, 41.5, 80.25))
    failed = replace(PLACE, error=Problem("aspect_ratio", "too thin"))
    skipped = replace(PLACE, error=Problem("model_none", "no recognition model was asked for"), skipped=True)
    for output in (recognized, failed, skipped, PLACE):
        assert region_output(Region(**region_row(output, 1, 0, (8, 18, 112, 72)))) == output


def test_a_pending_row_keeps_only_the_regions_place():
    row = region_row(replace(PLACE, source="model", content=TABLE, usage=Usage(310)), 1, 0, None, pending=True)
    assert row["status"] == "pending" and region_output(Region(**row)) == PLACE


def test_a_null_column_reads_as_the_fields_default():
    assert (from_columns(RegionContent, Region()), from_columns(Usage, Region())) == (RegionContent(), Usage())


def test_the_recognition_cache_gives_back_the_content_it_was_given(migrated_database: Engine):
    key = CropKey("acme", "rev-1", "table", "ab" * 32)
    with session_scope(migrated_database) as session:
        remember_recognitions(session, [(key, asdict(TABLE))])
    with session_scope(migrated_database) as session:
        [hit] = recall_recognitions(session, [key])
        assert from_columns(RegionContent, hit) == TABLE
