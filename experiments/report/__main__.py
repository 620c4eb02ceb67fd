"""Reproduce every figure of the four papers and write a report:

    python -m experiments.report                       # every CPU-sized config (~80 min, 2 cores)
    python -m experiments.report --quick               # every config at its smallest size (~4 min)
    python -m experiments.report --scale=paper --only=markov,ngrams --reuse
    python -m experiments.report --list                # the plan: configs, commands, reusable?
    python -m experiments.report --docs_figures        # the site's figures from the records

Outputs, `--reuse` and exit statuses: docs/design/experiments.md.
"""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.main("experiments.report.command")
