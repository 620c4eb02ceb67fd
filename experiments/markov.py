"""Attention with Markov experiments (notes/markov.md): python -m experiments.markov --config=...

python -m experiments.markov --config=configs/markov.py
python -m experiments.markov --config=configs/markov.py:landscape
"""

from experiments import cli
from landscape.markov import experiment

if __name__ == "__main__":
    cli.run(experiment)
