"""Associative-recall experiments (notes/assoc_recall.md): python -m experiments.recall --config=...

python -m experiments.recall --config=configs/recall.py
python -m experiments.recall --config=configs/recall.py:stages --workdir=runs/stages
"""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.paper("landscape.recall.experiment")
