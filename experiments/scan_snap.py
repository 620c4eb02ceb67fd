"""Scan & Snap experiments (Tian et al., 2023): python -m experiments.scan_snap --config=<file>.

python -m experiments.scan_snap --config=configs/syn_small.py
python -m experiments.scan_snap --config=configs/syn_medium.py --workdir=runs/fig6
python -m experiments.scan_snap --config=configs/syn_small.py --config.optim.lr_z=0.5
"""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.paper("landscape.scan_snap.experiment")
