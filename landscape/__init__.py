"""landscape: loss landscapes and training dynamics of small transformers on synthetic tasks.

    import landscape
    theta_pi = landscape.markov.theta_pi(p=0.5, q=0.8)   # the unigram point of Thm 2
    H = landscape.hessian_at(theta_pi)                  # exact, block-labelled Hessian
    print(H.describe())                                 # blocks, spectrum, verdict, prediction
"""

from landscape.curvature import gradient_at, hessian_at, hvp, lanczos_spectrum
from landscape.point import Point, param_names, params_table, restrict
from landscape import markov, ngrams, recall, scan_snap

__all__ = ["Point", "param_names", "params_table", "restrict", "gradient_at", "hessian_at", "hvp", "lanczos_spectrum",
           "markov", "ngrams", "recall", "scan_snap"]
