"""landscape: loss landscapes and training dynamics of small transformers on synthetic tasks.

    import landscape
    point = landscape.scan_snap.population_point(task, params)   # any package's Point
    H = landscape.hessian_at(point)                             # exact, block-labelled Hessian
    print(H.describe())
"""

from landscape.curvature import gradient_at, hessian_at, hvp, lanczos_spectrum
from landscape.point import Point, param_names, restrict
from landscape import scan_snap

__all__ = ["Point", "param_names", "restrict", "gradient_at", "hessian_at", "hvp", "lanczos_spectrum",
           "scan_snap"]
