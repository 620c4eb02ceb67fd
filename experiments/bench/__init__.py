"""The benchmark and its timings, apart from the CLIs: `python -m experiments.benchmark
[--only=GROUP]` (benchmark.py, with timing.py, wikitext_timing.py, probe_timing.py,
compile_timing.py, track_timing.py, and peers.py with peers_timing.py for the peers) and the
device check, `python -m experiments.device_check` (device_check.py); paper_size_probes.py runs
alone. A module that defines flags or runs as a program holds its command line alone (at most
80 lines); what it measures lives beside it in <name>_rows.py. The library and the CLIs import
nothing from here. Rows and targets: docs/design/experiments.md; the module map:
docs/architecture.md.
"""
