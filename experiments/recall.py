"""Associative-recall experiments (notes/assoc_recall.md): python -m experiments.recall --config=...

python -m experiments.recall --config=configs/recall.py
python -m experiments.recall --config=configs/recall.py:stages --workdir=runs/stages
"""

from experiments import cli
from landscape.recall import experiment

if __name__ == "__main__":
    cli.run(experiment)
