"""The service's stages, one module each, and the bookkeeping they share (pages.py).

A stage reads its state from the database, does its work, commits, and returns its sends as data; it never calls
a dispatcher and never imports the graph (pipeline/jobs/graph.py imports it, and runs it).
"""
