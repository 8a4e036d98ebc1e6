"""Documents: ingest, render, layout, regions, post-processing and assembly (the library half of Quire)."""
