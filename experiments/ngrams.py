"""In-context n-grams experiments (notes/ngrams.md): python -m experiments.ngrams --config=...

python -m experiments.ngrams --config=configs/ngrams.py
python -m experiments.ngrams --config=configs/ngrams.py:stationarity
"""

from experiments import cli
from landscape.ngrams import experiment

if __name__ == "__main__":
    cli.run(experiment)
