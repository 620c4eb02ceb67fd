"""What bfloat16 vectors cost against float32 on the peers MLP (`peers.py`, float32 loss):
`python -m experiments.bench.bfloat16_storage [D]` (default D = 1e5) prints each probe with
`storage="bfloat16"` against the same probe, keys and products in float32 vectors: eigenpairs'
certified top-5 (the largest relative value difference, the largest residual of each), Hutch++'s
trace (relative difference, float32's relative standard error) and SLQ's first two moments in a
full basis and in three vectors (the difference in float32's standard errors). Minutes on a CPU.
"""

from __future__ import annotations

import sys
import time

import jax.numpy as jnp
import numpy as np

from experiments.bench import peers, peers_data


def rows(dim: int = 100_000) -> list[tuple[str, str, str, str]]:
    """(probe, float32, bfloat16, bfloat16 against float32) a row, the numbers formatted."""
    import landscape

    point = peers.mlp_point(peers_data.mlp_arrays(peers_data.hidden_for(dim)), jnp.float32)
    out = []
    top = {s: landscape.eigenpairs(point, 5, "largest", storage=s, progress=None)
           for s in (None, "bfloat16")}  # fmt: skip
    scale = abs(top[None].values).max()
    change = np.max(np.abs(top["bfloat16"].values - top[None].values)) / scale
    out.append(("top-5 max Δλ / λ_max", f"{top[None].values[0]:.5g}",
                f"{top['bfloat16'].values[0]:.5g}", f"{change:.1e}"))  # fmt: skip
    out.append(("top-5 max residual / λ_max", f"{top[None].residuals.max() / scale:.1e}",
                f"{top['bfloat16'].residuals.max() / scale:.1e}", ""))  # fmt: skip
    trace = {s: landscape.trace(point, 30, storage=s, progress=None) for s in (None, "bfloat16")}
    change = abs(trace["bfloat16"].value - trace[None].value) / abs(trace[None].value)
    out.append(("Hutch++ trace (30 products)", f"{trace[None].value:.5g}",
                f"{trace['bfloat16'].value:.5g}", f"{change:.1e} (stderr "
                f"{trace[None].stderr / abs(trace[None].value):.1e})"))  # fmt: skip
    for basis in ("full", "three"):
        density = {
            s: landscape.spectral_density(point, 16, 30, basis=basis, storage=s, progress=None)
            for s in (None, "bfloat16")
        }
        for power in (1, 2):
            moments = {s: np.sum(d.weights * d.nodes**power, axis=1) for s, d in density.items()}
            mean, low = moments[None].mean(), moments["bfloat16"].mean()
            stderr = moments[None].std(ddof=1) / np.sqrt(len(moments[None]))
            out.append((f"SLQ {basis} basis, moment {power}", f"{mean:.5g}", f"{low:.5g}",
                        f"{abs(low - mean) / stderr:.2f} stderr"))  # fmt: skip
    return out


def markdown(dim: int) -> str:
    began = time.perf_counter()
    lines = ["| probe | float32 vectors | bfloat16 vectors | bfloat16 against float32 |",
             "|---|---|---|---|"]  # fmt: skip
    lines += ["| " + " | ".join(row) + " |" for row in rows(dim)]
    seconds = time.perf_counter() - began
    size = peers_data.count(peers_data.hidden_for(dim))
    return "\n".join(lines) + f"\n\nD = {size}; {seconds:.0f} s on this machine."


if __name__ == "__main__":
    print(markdown(int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000))
