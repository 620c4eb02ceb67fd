"""Thin command-line programs over the library: one CLI per paper, the report and the benchmark.

Importing the package changes nothing process-wide: a CLI program installs its Ctrl-C hook
itself, first (experiments/launch.py), and `running` marks `opened` once the workdir is open."""

opened = False  # a CLI opened its workdir: from then on it reports interruptions itself
