"""Probes on a model split over devices (landscape/core/layout.py): 8 CPU devices emulated in a
subprocess (--xla_force_host_platform_device_count=8), a 64 -> 96 -> 96 -> 10 MLP whose hidden
weights are split Megatron-style over a "model" axis of a (2, 4) mesh. The probes give one
device's numbers (the same random probes, hashed from their positions), their vectors lie
sharded, and the programs gather nothing of the size of the parameters."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests import children, hlo_collectives, once

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_EIGHT_DEVICES = r"""
import json, re
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import landscape
from experiments.bench import peers, peers_data
from landscape.core import krylov_schur, layout
from landscape.core import blocks, compiled, eigen_search
from landscape.probes import spectra, traces
from tests import hlo_collectives

one = peers.mlp_point(peers_data.mlp_arrays(96))
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P(),
         "w3": P(), "b3": P()}
params = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in one.params.items()}
split = one.with_params(params)
lay = layout.of(params)
w = np.random.default_rng(3).standard_normal(one.num_params).astype(np.float32)
out = {"D": one.num_params, "padded": lay.padded, "devices": lay.devices}
for name, point in (("one", one), ("split", split)):
    top = landscape.eigenpairs(point, 3, "largest", dense_below=0, progress=None)
    out[name] = dict(
        top=top.values.tolist(), residuals=top.residuals.tolist(), converged=top.converged,
        vector=np.abs(top.flat_vectors[0]).tolist()[:50], grad=top.gradient.vector[:50].tolist(),
        trace=landscape.trace(point, 12, progress=None).value,
        nodes=landscape.spectral_density(point, 2, 8, progress=None).nodes.tolist(),
        three=landscape.spectral_density(
            point, 2, 7, progress=None, basis="three").nodes.tolist(),
        lanczos=landscape.lanczos_spectrum(point, 8, progress=None).ritz_values.tolist(),
        diagonal=landscape.diagonal(point, 4).values.tolist(),
        hvp_flat=np.asarray(landscape.hvp_flat(point)[1](w)).tolist()[:50],
        escape=landscape.escape_directions(point, k=2, dense_below=0, progress=None)
        .measured.tolist(),
        hvp=[np.asarray(x).ravel()[:8].tolist() for x in jax.tree.leaves(
            landscape.hvp(point)(landscape.trees.unravel_numpy(point.params, w)))],
    )
# SLQ in three vectors on pytrees split as the parameters, as where flat vectors do not fit
chosen, spectra._on_pytrees = spectra._on_pytrees, lambda *arguments: True
out["split"]["three, pytrees"] = landscape.spectral_density(
    split, 2, 7, progress=None, basis="three").nodes.tolist()
spectra._on_pytrees = chosen
# the results stay where the parameters lie: each eigenvector's and gradient's leaf split as
# its parameter (a copy on the host only when flat_vectors or vector is read)
compiles = [0]
def count_compiles(event, _, **__):
    compiles[0] += event.endswith("backend_compile_duration")
jax.monitoring.register_event_duration_secs_listener(count_compiles)
top = landscape.eigenpairs(split, 3, "largest", dense_below=0, progress=None)
before = compiles[0]
out["new_k"] = dict(values=landscape.eigenpairs(
    split, 2, "largest", dense_below=0, progress=None).values.tolist(), top=top.values.tolist())
out["new_k"]["programs"] = compiles[0] - before
out["bfloat16"] = {name: dict(zip(("values", "residuals", "converged"), (lambda t: (
    t.values.tolist(), t.residuals.tolist(), t.converged))(landscape.eigenpairs(
    point, 3, "largest", dense_below=0, progress=None, storage="bfloat16"))))
    for name, point in (("one", one), ("split", split))}
def laid_as_params(tree):
    return [isinstance(x, jax.Array) and x.sharding.is_equivalent_to(params[k].sharding, x.ndim)
            for k, x in tree.items()]
out["kept"] = dict(
    vectors=[laid_as_params(v) for v in top.vectors],
    gradient=laid_as_params(top.gradient.tree),
    gradient_at=laid_as_params(landscape.gradient_at(split).tree),
    escape=[laid_as_params(v) for v in landscape.escape_directions(
        split, k=2, dense_below=0, progress=None).eigen.vectors],
    copied="flat_vectors" in vars(top), norm=top.gradient.norm,
    host_norm=float(np.linalg.norm(top.gradient.vector)),
)
# a list of split points: one at a time in their layout, the split point's program serving all
scaled = one.with_params({k: v * 1.1 for k, v in one.params.items()})
scaled_split = scaled.with_params(
    {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in scaled.params.items()})
programs = traces.trace_block._cache_size()
out["listed_split"] = [t.value for t in landscape.trace([split, scaled_split], 12, progress=None)]
out["listed_new_programs"] = traces.trace_block._cache_size() - programs
out["listed_one"] = [t.value for t in landscape.trace([one, scaled], 12, progress=None)]
x, y = (np.asarray(a) for a in one.inputs)  # a stream of 4 batches: its vectors ravel_pytree's
streamed = landscape.stream([(x[i : i + 128], y[i : i + 128]) for i in range(0, 512, 128)])
out["streamed_top"] = [landscape.eigenpairs(
    landscape.Point(p, objective=peers.mlp_objective, batches=streamed), 2, "largest",
    dense_below=0, progress=None).values.tolist() for p in (one.params, params)]
try:  # a search that does not fit a device: the bytes a device's, the mesh named
    blocks.plan(split, 1, "eigenpairs", 1e12, free=1e6, hint="ask for a smaller k", mesh=lay.mesh)
except MemoryError as error:
    out["refusal"] = str(error)
try:  # the tracker measuring parameters split otherwise than its like
    landscape.tracker(peers.mlp_objective, like=params).init(one.params, jax.random.key(0))
except ValueError as error:
    out["tracker_mismatch"] = str(error)
back = jax.jit(lay.from_flat)(jax.jit(lay.to_flat)(params))
out["round_trip"] = max(float(np.abs(np.asarray(back[k]) - np.asarray(params[k])).max())
                        for k in params)
objective, inputs = one.shared
settings = krylov_schur.Settings(3, 12, lay.dim, "largest", 1e-5, 10)
plan = krylov_schur.plan(settings, krylov_schur.init(settings), np.dtype(np.float32))
vectors = jax.device_put(np.zeros((15, lay.padded), np.float32), lay.sharding(1))
search = eigen_search.advance.lower(objective, params, inputs, vectors, plan, jax.random.key(0),
                              "largest", lay)
state = traces.TraceState(*(jax.device_put(np.zeros(s, np.float32), w) for s, w in (
    ((4, lay.padded), lay.sharding(1)), ((), None), ((4,), None))))
trace = traces.trace_block.lower(objective, params, inputs, jax.random.key(0), state,
                                  np.int32(0), np.arange(4, dtype=np.int32), False, lay)
product = compiled.hvp.lower(objective, params, inputs, params, False, lay)
largest, overlaps = 0, []
for program in (search, trace, product):
    text = program.compile().as_text()
    overlaps += hlo_collectives.overlaps(text)
    for line in text.splitlines():
        found = re.search(r"= \w+\[([\d,]*)\]\S* (all-gather|collective-permute)", line)
        if found:  # per vector: a batch of probes gathers (K, part) at once
            largest = max(largest, int(found.group(1).split(",")[-1] or 1))
out["largest_gathered"] = largest
# and the search on a 1-D mesh (the hidden layers split over all 8 devices)
line = Mesh(np.array(jax.devices()), ("model",))
lined = {k: jax.device_put(v, NamedSharding(line, specs[k])) for k, v in one.params.items()}
flat = layout.of(lined)
rows = jax.device_put(np.zeros((15, flat.padded), np.float32), flat.sharding(1))
overlaps += hlo_collectives.overlaps(eigen_search.advance.lower(
    objective, lined, inputs, rows, plan, jax.random.key(0), "largest", flat).compile().as_text())
out["overlaps"] = overlaps
out["vectors_per_device"] = vectors.addressable_shards[0].data.shape[1]
out["held"] = list(layout.of(params).held)
# the same probes with the blocks split among the data pairs (as when held vectors do not fit)
layout._HOLDING.clear()
layout.HOLD_VECTORS, hold = 10**15, layout.HOLD_VECTORS
apart = one.with_params({k: v + 0 for k, v in params.items()})
top = landscape.eigenpairs(apart, 3, "largest", dense_below=0, progress=None)
out["split_apart"] = dict(held=list(layout.of(params).held), top=top.values.tolist(),
                          trace=landscape.trace(apart, 12, progress=None).value,
                          vector=np.abs(top.flat_vectors[0]).tolist()[:50])
layout._HOLDING.clear()
layout.HOLD_VECTORS = hold

# data parallel: the dataset in 4 batches whose examples split over "data", the model as above
x, y = one.inputs
stacked = (x.reshape(4, 128, 64), y.reshape(4, 128))
over_data = NamedSharding(mesh, P(None, "data"))
kw = dict(objective=peers.mlp_objective, outputs=peers.mlp_outputs,
          output_loss=peers.mlp_output_loss)
ref = landscape.Point(one.params, batches=stacked, **kw)
dp = landscape.Point(params, batches=tuple(jax.device_put(b, over_data) for b in stacked), **kw)
for name, point in (("batches_one", ref), ("batches_split", dp)):
    out[name] = {m: dict(  # the search on H only: G's products are the trace's and hvp_flat's
        top=landscape.eigenpairs(point, 3, "largest", dense_below=0, progress=None,
                                 matrix=m).values.tolist() if m == "hessian" else [],
        trace=landscape.trace(point, 12, progress=None, matrix=m).value,
        hvp_flat=np.asarray(landscape.hvp_flat(point, m)[1](w)).tolist()[:50],
    ) for m in ("hessian", "ggn")}
# the functional tracker inside a jitted function, its vectors in the layout (like=params)
def measured(point, like):
    tracker = landscape.tracker(peers.mlp_objective, num_iters=6, k=2, like=like)
    state = tracker.init(point.params, jax.random.key(5))
    step = jax.jit(tracker.update)
    rows = []
    for _ in range(2):
        found, state = step(state, point.params, point.inputs)
        rows.append([float(found.lambda_max), float(found.top_k[1]), float(found.lambda_min)])
    return rows, state.vectors
out["tracker_one"], _ = measured(one, None)
out["tracker_split"], kept = measured(split, params)
out["tracker_per_device"] = kept.addressable_shards[0].data.shape[-1]
lay = layout.spread(params, dp.batches)
out["data_axes"] = list(lay.data)
objective, inputs = dp.shared
text = eigen_search.advance.lower(objective, params, inputs, vectors, plan, jax.random.key(0),
                            "largest", lay).compile().as_text()
# each all-reduce over the data axis, by the number of while loops around it (the search's
# loop is one; a scan over the batches inside it would be two)
calls, where, depth = {}, None, {}
for line in text.splitlines():
    if line and not line.startswith(" ") and line.rstrip().endswith("{"):
        where = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
        calls[where] = []
        if line.startswith("ENTRY"):
            depth[where] = 0
        continue
    for kind, name in re.findall(r"(body|condition|to_apply|calls|computation)=%([\w.\-]+)", line):
        calls[where].append((name, kind == "body"))
    for group in re.findall(r"branch_computations=\{([^}]*)\}", line):
        calls[where] += [(name.strip().lstrip("%"), False) for name in group.split(",")]
todo = list(depth)
while todo:
    here = todo.pop()
    for name, is_body in calls.get(here, []):
        if name not in depth:
            depth[name] = depth[here] + is_body
            todo.append(name)
data_groups = ("{{0,4},{1,5},{2,6},{3,7}}", "[4,2]<=[2,4]T(1,0)",  # XLA's three spellings
               "mesh['axis_0'=2,'axis_1'=4] {'axis_0'}")
reduced, where = [], None
for line in text.splitlines():
    if line and not line.startswith(" ") and line.rstrip().endswith("{"):
        where = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
    if re.search(" (all-reduce|reduce-scatter)\\(", line) and any(g in line for g in data_groups):
        result = re.split(" (?:all-reduce|reduce-scatter)\\(", line)[0].split("=", 1)[1]
        size = sum(int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
                   for dims in re.findall(r"\[([\d,]*)\]", result))
        reduced.append((depth.get(where, -1), size))
out["data_reductions"] = reduced
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory, request):
    """The subprocess's numbers, computed once a session: pytest-xdist may run this module's
    tests on both workers, or one worker may come back to the module after others (a module
    fixture is then set up again), so the first to arrive computes and the others read."""
    shared = once.session_folder(tmp_path_factory, request)
    return once.once(shared / "eight_devices.json", _eight_devices)


def _eight_devices() -> dict:
    return children.last_json_line(_EIGHT_DEVICES, devices=8, timeout=600)


def test_the_probes_on_a_split_model_give_one_devices_numbers(eight_devices):
    one, split = eight_devices["one"], eight_devices["split"]
    assert one["converged"] and split["converged"]
    for a, b in zip(one["top"], split["top"], strict=True):
        assert abs(a - b) <= 1e-4 * abs(a)  # both certified to rtol 1.2e-5 of the scale
    assert max(split["residuals"]) <= 1.2e-5 * max(map(abs, split["top"])) * 1.01
    for a, b in zip(one["vector"], split["vector"], strict=True):  # the same eigenvector, up
        assert abs(a - b) <= 1e-3  # to its sign, in ravel_pytree's order
    for a, b in zip(one["grad"], split["grad"], strict=True):
        assert abs(a - b) <= 1e-6 * (1 + abs(a))
    assert abs(one["trace"] - split["trace"]) <= 1e-5 * abs(one["trace"])  # the same probes
    measured = np.asarray(one["escape"])  # L(θ + εv) + L(θ - εv) - 2 L(θ), two directions;
    assert measured.shape == (2, 3) and np.all(measured[:, -1] < -1e-5)  # at ε = 1e-2 64 ulps
    assert np.max(np.abs(measured[:, -1] - np.asarray(split["escape"])[:, -1])) <= 1e-6  # of L
    hv = np.asarray(one["hvp_flat"])  # a product in ravel_pytree's order, and as a pytree
    assert np.max(np.abs(hv - split["hvp_flat"])) <= 1e-5 * np.max(np.abs(hv))
    for a, b in zip(one["hvp"], split["hvp"], strict=True):
        assert np.max(np.abs(np.subtract(a, b))) <= 1e-5 * np.max(np.abs(hv))
    diagonal = np.asarray(one["diagonal"])  # the same probes, in ravel_pytree's order
    assert np.max(np.abs(diagonal - split["diagonal"])) <= 1e-5 * np.max(np.abs(diagonal))
    for name, other in (
        ("nodes", "nodes"),
        ("three", "three"),
        ("three", "three, pytrees"),
        ("lanczos", "lanczos"),
    ):  # "three": SLQ in three vectors, 7 steps
        flat = [x for row in one[name] for x in (row if isinstance(row, list) else [row])]
        other = [x for row in split[other] for x in (row if isinstance(row, list) else [row])]
        assert max(abs(a - b) for a, b in zip(flat, other, strict=True)) <= 1e-4 * max(
            map(abs, flat)
        )


def test_blocks_split_among_the_data_pairs_give_the_same_numbers(eight_devices):
    """When held vectors would not fit (`layout.holding`), each block replicated over the data
    axis is split between its two devices and gathered in a product: one device's numbers."""
    one, apart = eight_devices["one"], eight_devices["split_apart"]
    assert apart["held"] == []
    for a, b in zip(one["top"], apart["top"], strict=True):
        assert abs(a - b) <= 1e-4 * abs(a)
    assert abs(one["trace"] - apart["trace"]) <= 1e-5 * abs(one["trace"])
    for a, b in zip(one["vector"], apart["vector"], strict=True):
        assert abs(a - b) <= 1e-3


def test_a_split_models_vectors_and_gradients_stay_on_its_devices(eight_devices):
    """Eigenvectors and gradients come back as pytrees split as the parameters lie, nothing of
    size D copied to the host until `flat_vectors` or `vector` is read."""
    kept = eight_devices["kept"]
    assert kept["vectors"] == [[True] * 6] * 3
    assert kept["gradient"] == kept["gradient_at"] == [True] * 6
    assert kept["escape"] == [[True] * 6] * 2
    assert not kept["copied"]
    assert abs(kept["norm"] - kept["host_norm"]) <= 1e-6 * kept["host_norm"]


def test_a_new_k_of_a_split_models_search_compiles_nothing(eight_devices):
    """eigenpairs(split, 2) after eigenpairs(split, 3): the same search program and the same
    programs that lay its rows out as the parameters (a row at a time), where an eager gather
    of each leaf compiled 23 programs; the same top pairs."""
    new_k = eight_devices["new_k"]
    assert new_k["programs"] == 0
    np.testing.assert_allclose(new_k["values"], new_k["top"][:2], rtol=1e-4)


def test_a_split_models_search_in_bfloat16_gives_one_devices_pairs(eight_devices):
    """The search's vectors held in bfloat16 over the mesh (each device its columns' bits):
    certified at bfloat16's floor (rtol twice its eps), each value within the two runs'
    residuals of one device's, and within 2 u λ_max of float32's top (a Rayleigh quotient's
    first-order change, `test_product_options`)."""
    runs, top = eight_devices["bfloat16"], eight_devices["one"]["top"]
    scale = max(map(abs, top))
    for run in runs.values():
        assert run["converged"]
        assert max(run["residuals"]) <= 2 * 2**-7 * scale * 1.01
    one, split = runs["one"], runs["split"]
    for a, b, ra, rb in zip(one["values"], split["values"], one["residuals"],
                            split["residuals"], strict=True):  # fmt: skip
        assert abs(a - b) <= ra + rb
    assert np.max(np.abs(np.subtract(split["values"], top))) <= 2 * 2**-8 * scale


def test_a_list_of_split_points_is_probed_in_their_layout(eight_devices):
    """A list of split points: each one in its layout by the split point's program (no new
    program, where stacking them would compile a vmapped one over whole flat vectors), equal to
    one device's list; the tracker says so when it measures parameters split otherwise."""
    found = eight_devices
    assert found["listed_new_programs"] == 0
    assert found["listed_split"][0] == found["split"]["trace"]
    for a, b in zip(found["listed_one"], found["listed_split"], strict=True):
        assert abs(a - b) <= 1e-5 * abs(a)
    assert "tracker.init: params lie split as [None" in found["tracker_mismatch"]
    assert re.fullmatch(  # 1e12 bytes of vectors, a quarter a device (the data pairs hold theirs
        r"eigenpairs: one Hessian-vector product of mlp h=96 and its Lanczos vectors needs about "
        r"250 GB on each of the mesh's 8 devices \(data 2 x model 4\) but 1 MB is free: "
        r"ask for a smaller k\.",
        found["refusal"],
    )
    one, split = found["streamed_top"]  # a streamed dataset on a split model: whole vectors
    assert max(abs(a - b) for a, b in zip(one, split, strict=True)) <= 1e-4 * abs(one[0])


def test_a_split_models_vectors_lie_sharded_and_nothing_of_size_d_is_gathered(eight_devices):
    found = eight_devices
    assert found["devices"] == 8 and found["round_trip"] == 0.0
    # the data axis holds its blocks alike (`layout.holding`): each device a quarter, over model
    assert found["held"] == ["data"] and found["vectors_per_device"] == found["padded"] // 4
    assert found["padded"] - found["D"] < 8 * 64  # the parts' padding is small
    # the search's, the trace's and hvp's programs: no gather of a whole flat vector (D), only of a
    # device's block of a weight over the data axis (it is replicated there, its part split)
    assert found["largest_gathered"] < found["D"] // 2


def test_no_two_collectives_of_a_probes_program_run_at_once_on_a_device(eight_devices):
    """The search's program on the 2 x 4 and the 1-D mesh, Hutch++'s block and a product's: no
    conditional or loop holding a collective has another collective after it that does not
    wait for it, so XLA:CPU starts each only after the one before has finished
    (docs/guide/split_model.md, "Emulated devices")."""
    assert eight_devices["overlaps"] == []


def test_the_overlap_reader_finds_a_conditional_beside_a_collective():
    """tests/hlo_collectives.py on a scheduled module: a conditional holding an all-reduce,
    then a reduce-scatter that does not wait for it, is a pair; one that reads its result is
    not; a conditional holding none is not."""
    text = """HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%reduced (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %all-reduce.1 = f32[8]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add
}

%kept (q: f32[8]) -> f32[8] {
  ROOT %q = f32[8]{0} parameter(0)
}

ENTRY %main (x: f32[8], y: f32[16], c: pred[]) -> (f32[8], f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %y = f32[16]{0} parameter(1)
  %c = pred[] parameter(2)
  %conditional.1 = f32[8]{0} conditional(%c, %x, %x), true_computation=%reduced,\
    false_computation=%kept
  %conditional.2 = f32[8]{0} conditional(%c, %x, %x), true_computation=%kept,\
    false_computation=%kept
  %reduce-scatter.1 = f32[8]{0} reduce-scatter(%y), replica_groups={{0,1}}, dimensions={0},\
    to_apply=%add
  %after = f32[8]{0} add(%conditional.1, %x)
  %all-reduce.2 = f32[8]{0} all-reduce(%after), replica_groups={{0,1}}, to_apply=%add
  ROOT %out = (f32[8]{0}, f32[8]{0}, f32[8]{0}) tuple(%reduce-scatter.1, %all-reduce.2,\
    %conditional.2)
}
"""
    assert hlo_collectives.overlaps(text) == ["main: conditional.1 -> reduce-scatter.1"]


def test_the_tracker_keeps_its_vectors_split_and_gives_one_devices_numbers(eight_devices):
    """`tracker(like=params)` inside a jitted step: the same start in every layout, so the same
    Ritz values (two measurements, the second warm), its kept vectors a quarter a device (the
    data pairs hold theirs alike)."""
    one, split = np.asarray(eight_devices["tracker_one"]), eight_devices["tracker_split"]
    assert np.max(np.abs(one - split)) <= 1e-4 * np.max(np.abs(one))
    assert eight_devices["tracker_per_device"] == eight_devices["padded"] // 4


def test_a_dataset_split_over_a_data_axis_gives_one_devices_numbers(eight_devices):
    """Batches whose examples split over "data", the model over "model": the Hessian's top-3,
    and both matrices' traces and products, equal one device's on the same batches."""
    one, split = eight_devices["batches_one"], eight_devices["batches_split"]
    for matrix in ("hessian", "ggn"):
        for a, b in zip(one[matrix]["top"], split[matrix]["top"], strict=True):
            assert abs(a - b) <= 1e-4 * abs(a)
        assert abs(one[matrix]["trace"] - split[matrix]["trace"]) <= 1e-5 * one[matrix]["trace"]
        hv = np.asarray(one[matrix]["hvp_flat"])
        assert np.max(np.abs(hv - split[matrix]["hvp_flat"])) <= 1e-5 * np.max(np.abs(hv))


def test_a_dataset_split_over_a_data_axis_is_reduced_once_a_product(eight_devices):
    """The search's program sums the devices' shares once a product, after the scan over the
    batches: every large all-reduce over the data axis sits in the search's loop (one while
    loop deep), none in the scan (two)."""
    assert eight_devices["data_axes"] == ["data"]
    large = [depth for depth, size in eight_devices["data_reductions"] if size >= 1000]
    assert large and set(large) <= {0, 1}, eight_devices["data_reductions"]
    assert large.count(1) == 1  # one product's reduction in the loop's body


_PROCESS = r"""
import json, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import landscape
from experiments.bench import peers, peers_data

one = peers.mlp_point(peers_data.mlp_arrays(96))
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P(),
         "w3": P(), "b3": P()}
params = {k: jax.device_put(np.asarray(v), NamedSharding(mesh, specs[k]))
          for k, v in one.params.items()}
replicated = NamedSharding(mesh, P())
inputs = tuple(jax.device_put(np.asarray(x), replicated) for x in one.inputs)
split = landscape.Point(params, objective=one.objective, inputs=inputs)
top = landscape.eigenpairs(split, 3, "largest", dense_below=0, progress=None)
print(json.dumps(dict(
    devices=[jax.process_count(), jax.device_count(), jax.local_device_count()],
    top=top.values.tolist(), converged=top.converged,
    vector=np.abs(top.flat_vectors[0]).tolist()[:50], grad=top.gradient.vector[:50].tolist(),
    trace=landscape.trace(split, 12, progress=None).value,
    nodes=landscape.spectral_density(split, 2, 8, progress=None).nodes.tolist(),
    diagonal=landscape.diagonal(split, 4).values.tolist(),
)))
"""


@pytest.mark.slow
def test_two_processes_of_four_devices_take_the_same_decisions_and_give_one_devices_numbers(
    eight_devices, tmp_path
):
    """jax.distributed on this machine (CPU collectives over gloo): the model split over a
    (2, 4) mesh of both processes' devices; each process takes the search's decisions on the
    same numbers, so both print the same answer, one device's."""
    from tests.engine.test_distributed import _free_port

    env = children.environment(devices=4)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # each process compiles its own programs
    address = f"127.0.0.1:{_free_port()}"
    logs = [tmp_path / f"process{i}.log" for i in range(2)]  # files: gloo's many lines would
    with open(logs[0], "w") as out0, open(logs[1], "w") as out1:  # fill a pipe and stall
        procs = [  # its process inside a collective
            subprocess.Popen(
                [sys.executable, "-c", _PROCESS, address, str(i)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
            for i, out in enumerate((out0, out1))
        ]
        codes = [p.wait(timeout=600) for p in procs]
    for code, log in zip(codes, logs, strict=True):
        assert code == 0, log.read_text()[-3000:]
    outs = [log.read_text() for log in logs]
    first, second = (json.loads(out.strip().splitlines()[-1]) for out in outs)
    assert first == second and first["devices"] == [2, 8, 4] and first["converged"]
    one = eight_devices["one"]
    for a, b in zip(one["top"], first["top"], strict=True):
        assert abs(a - b) <= 1e-4 * abs(a)
    for a, b in zip(one["vector"], first["vector"], strict=True):
        assert abs(a - b) <= 1e-3
    for a, b in zip(one["grad"], first["grad"], strict=True):
        assert abs(a - b) <= 1e-6 * (1 + abs(a))
    assert abs(one["trace"] - first["trace"]) <= 1e-5 * abs(one["trace"])
    diagonal = np.asarray(one["diagonal"])
    assert np.max(np.abs(diagonal - first["diagonal"])) <= 1e-5 * np.max(np.abs(diagonal))
    nodes = np.asarray(one["nodes"])
    assert np.max(np.abs(nodes - np.asarray(first["nodes"]))) <= 1e-4 * np.max(np.abs(nodes))


_LINE_AT_2E6 = r"""
import json, sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import landscape
from experiments.bench import peers, peers_data

one = peers.mlp_point(peers_data.mlp_arrays(1400))  # D = 2,066,410
mesh = Mesh(np.array(jax.devices()), ("model",))
specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P(),
         "w3": P(), "b3": P()}
point = one.with_params(
    {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in one.params.items()})
top = landscape.eigenpairs(point, 5, "largest", dense_below=0, progress=None)
trace = landscape.trace(point, 100, method="hutch++", progress=None)
print(json.dumps(dict(top=top.values.tolist(), converged=bool(top.converged), trace=trace.value)))
"""


@pytest.mark.slow
def test_a_top_5_and_hutchpp_at_two_million_parameters_on_a_1d_mesh_of_8_devices():
    """A case that strains XLA:CPU's rendezvous: the peers MLP at h = 1400 split
    over all 8 emulated devices, its top-5 and a 100-probe Hutch++ trace (about 5 minutes)."""
    found = children.last_json_line(_LINE_AT_2E6, devices=8, timeout=1800)
    assert found["converged"] and 0.6 < min(found["top"]) <= max(found["top"]) < 0.8
    assert 100 < found["trace"] < 250
