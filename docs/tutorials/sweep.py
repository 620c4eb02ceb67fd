# %% [markdown]
# # A sweep as one program
#
# Seeds x learning rates of Scan and Snap's Syn-Small task (Fig. 4 of Tian et al.), trained as
# one compiled, vmapped program: load the config file, override fields as on the command line,
# build the grid, run it into a workdir, read `metrics.jsonl` with pandas and plot the loss
# curves by learning rate with a band over seeds. The same run from the command line closes
# the tutorial.
#
# From the repository root, `python docs/tutorials/sweep.py` runs it (15-60 s on 2 cores,
# most of it compiling; `LANDSCAPE_TUTORIAL_TINY=1` for fewer steps). The records go to
# `runs/tutorials/sweep/` (or `$LANDSCAPE_TUTORIAL_WORKDIR`).

# %%
import os
import pathlib
import sys

import ml_collections
import numpy as np
import pandas as pd

import landscape
from landscape import config as config_lib
from landscape import plotting, records, sweeps
from landscape.engine.overrides import apply_overrides, load_config, nested
from landscape.scan_snap import experiment

landscape.setup()  # as the CLIs do: a CPU device per core, the compilation cache, float32 dots
TINY = bool(os.environ.get("LANDSCAPE_TUTORIAL_TINY"))
WORKDIR = pathlib.Path(os.environ.get("LANDSCAPE_TUTORIAL_WORKDIR", "runs/tutorials/sweep"))


def show(fig, name):
    """Save the figure as a record of WORKDIR (figures/, in its manifest, so that a rerun with
    overwrite=True replaces it); in a notebook also draw it."""
    path = plotting.save(fig, records.Workdir(WORKDIR).figure_path(name))
    if "ipykernel" in sys.modules:
        from IPython.display import Image, display

        display(Image(filename=str(path)))


# %% [markdown]
# ## A config and its overrides
#
# `configs/syn_small.py` builds a `ConfigDict` from the package's `default_config()`, which is
# also the schema. `load_config` reads a config file as the command line's `--config` does,
# and `apply_overrides` applies `--config.a.b=value` pairs, parsed as each field's
# type and checked against the schema: an unknown field or a value out of range is one sentence
# before anything compiles. Here: 4 seeds, batches of 8 instead of 128 (so that the seeds'
# batches, and their curves, differ visibly), a learning-rate axis `optim.lr_z`, and the ratio
# η_Y/η_Z fixed at 1, which drops the config's own sweep over it (and says so).

# %%
data = load_config("configs/syn_small.py")
overrides = [
    ("num_seeds", "4"),
    ("train.batch_size", "8"),
    ("optim.lr_y_over_lr_z", "1.0"),
    ("sweep.optim.lr_z", "[0.25, 0.5, 1.0]"),
]
if TINY:
    overrides += [("train.num_steps", "20")]
schema = config_lib.flatten(experiment.default_config())
for note in apply_overrides(data, overrides, schema):
    print(note)
cfg = ml_collections.ConfigDict(nested(data))
experiment.validate(cfg)
print(f"{cfg.name}: sweep {cfg.sweep.to_dict()}, seeds {cfg.seed}..{cfg.seed + cfg.num_seeds - 1}")

# %% [markdown]
# ## The grid and the run
#
# The learning rates are *traced* hyperparameters (`experiment.TRACED`), so every value x seed
# is one run of the same compiled program: `sweeps.Grid` flattens 3 learning rates x 4 seeds
# into 12 runs, and `sweeps.run` shards them over the devices and trains them together.
# `Problem` (model, loss, learning rates by parameter group) comes from the paper package.
# With `workdir=` the run writes its complete record there.

# %%
task = experiment.make_task(cfg)
problem = experiment.make_problem(cfg, task)
seeds = np.arange(cfg.seed, cfg.seed + cfg.num_seeds)
grid = sweeps.Grid.make(config_lib.traced_axes(cfg, experiment.TRACED), seeds)
print(f"grid {grid.shape} (lr_z x seeds) = {grid.size} runs")
result = sweeps.run(
    problem,
    cfg.optim,
    {name: config_lib.get(cfg, name) for name in experiment.TRACED},  # the traced base values
    grid,
    dtype=np.dtype(cfg.train.dtype),
    workdir=WORKDIR,
    config=cfg,
    overwrite=True,
    progress=None,  # no progress line per chunk
    **sweeps.train_options(cfg),  # num_steps, log_every, ...
)
print(f"compile {result.compile_seconds:.1f} s, run {result.run_seconds:.2f} s")
print(sorted(p.name for p in WORKDIR.iterdir()))

# %% [markdown]
# ## The records, with pandas
#
# `metrics.jsonl` holds one row per run per logged step, tagged with the run's seed and swept
# values; `population_loss` is the exact loss over the task's distribution, logged every
# `train.log_every` steps.

# %%
rows = pd.read_json(WORKDIR / "metrics.jsonl", lines=True)
print(rows.columns.tolist(), len(rows), "rows")
final = rows[rows.step == rows.step.max()]
print(final.groupby("optim.lr_z").population_loss.agg(["mean", "min", "max"]))

# %% [markdown]
# ## Loss curves by learning rate, with a band over seeds
#
# One line per learning rate: the mean over seeds, and the band between the lowest and the
# highest seed: the batch loss (left) and the exact population loss (right). Every seed
# starts from Y = Z = 0; only the batches they draw differ.

# %%
fig, axes = plotting.subplots(1, 2, width=4.0, height=3.0)
for column, ax in zip(["loss", "population_loss"], axes[0], strict=True):
    for lr, runs in rows.groupby("optim.lr_z"):
        logged = runs.dropna(subset=[column])  # the batch loss starts at step 1
        curves = logged.pivot(index="seed", columns="step", values=column)  # (seeds, steps)
        steps = curves.columns.to_numpy()
        plotting.mean_and_band(ax, steps, curves.to_numpy(), label=f"η_Z = {lr:g}", log_y=True)
    ax.set(xlabel="step", ylabel=column.replace("_", " "))
axes[0, 0].legend()
fig.suptitle(f"{cfg.name}: {grid.size} runs in one program", fontsize=9)
show(fig, "loss_by_lr")

# %% [markdown]
# ## The same sweep from the command line
#
# The CLI does all of the above from flags, and adds the paper's figures and claims to the
# record; its `metrics.jsonl` holds the same rows as ours, number for number (the same
# `landscape.setup()`, config and seeds):
#
# ```bash
# python -m experiments.scan_snap --config=configs/syn_small.py --config.num_seeds=4 \
#     --config.train.batch_size=8 --config.optim.lr_y_over_lr_z=1.0 \
#     --config.sweep.optim.lr_z='[0.25, 0.5, 1.0]' --workdir=runs/tutorials/sweep_cli
# ```
#
# More: [Sweeps](../../guide/sweeps/) (structural axes, devices),
# [Configs and overrides](../../guide/configs/), [Records and workdirs](../../guide/records/).
