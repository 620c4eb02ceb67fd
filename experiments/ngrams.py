"""In-context n-grams experiments (notes/ngrams.md): python -m experiments.ngrams --config=...

python -m experiments.ngrams --config=configs/ngrams.py
python -m experiments.ngrams --config=configs/ngrams.py:stationarity
"""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.paper("landscape.ngrams.experiment")
