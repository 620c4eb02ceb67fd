"""Scan & Snap experiments (Tian et al., 2023): python -m experiments.scan_snap --config=<file>.

python -m experiments.scan_snap --config=configs/syn_small.py
python -m experiments.scan_snap --config=configs/syn_medium.py --workdir=runs/fig6
python -m experiments.scan_snap --config=configs/syn_small.py --config.optim.lr_z=0.5
"""

from experiments import cli
from landscape.scan_snap import experiment

if __name__ == "__main__":
    cli.run(experiment)
