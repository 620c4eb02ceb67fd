"""`python -m experiments.report`: every figure of the four papers, run and reported (see
__main__.py). catalog.py lists the figures and their configs, run.py runs them, write.py writes
the report."""
