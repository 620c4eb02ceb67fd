"""Thin command-line programs over the library: one CLI per paper, the report and the benchmark.

Importing the package changes nothing process-wide: a CLI program installs its Ctrl-C hook
itself, first (experiments/launch.py), and `cli` marks `opened` once it has opened the workdir."""

opened = False  # a CLI opened its workdir: from then on it reports interruptions itself
