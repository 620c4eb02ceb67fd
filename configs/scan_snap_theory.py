"""Theory figures 3, 8 and 9 of Tian et al. from the closed forms (notes/scan_snap.md §4, §5.3-5.9).

    python -m experiments.scan_snap --config=configs/scan_snap_theory.py

M = 1000, K = 10, rho0 = 1 (the notes' proposal; the paper does not give them). Fig. 3: the growth
factor bound exp(2 B_n(t)) at eta_Z = 0.5 for eta_Y in {0.1, 0.2, 0.5, 1, 2}. Fig. 8: h*(s) against
h(s). Fig. 9: B_n(t) for eta_Z in {0.1, 0.5, 1} at ratios eta_Y/eta_Z in {1, 2, 5}.
Expected time: about a second (NumPy, float64).
"""

import ml_collections

from landscape.scan_snap.experiment import default_config


def get_config() -> ml_collections.ConfigDict:
    c = default_config()
    c.name = "scan_snap_theory"
    c.experiment = "theory"
    return c
