"""Attention with Markov experiments (notes/markov.md): python -m experiments.markov --config=...

python -m experiments.markov --config=configs/markov.py
python -m experiments.markov --config=configs/markov.py:landscape
"""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.paper("landscape.markov.experiment")
