"""Thin command-line programs over the library: one CLI per paper, the report and the benchmark."""
