"""Every public probe's answers equal the committed golden file (`tests/golden/answers.py`):
values to 1e-12 in float64, eigenvectors up to sign, product counts no larger. A refactor of
the probes, the tracker or the Krylov core moves code, not these answers."""

import numpy as np
import pytest

from tests.golden import answers

ATOL = 1e-12


@pytest.fixture(scope="module")
def found():
    return answers.compute()


@pytest.fixture(scope="module")
def stored():
    with np.load(answers.STORED) as data:
        return {key: data[key] for key in data.files}


def test_the_same_answers_are_computed(found, stored):
    assert sorted(found) == sorted(stored)


def _projectors(vectors: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    """The projector onto each group of equal eigenvalues' vectors (rows): what an eigenspace
    fixes, whatever basis of it and signs a solver picks."""
    groups, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or abs(values[i] - values[start]) > 1e-8 * max(1, abs(values[0])):
            groups.append(vectors[start:i].T @ vectors[start:i])
            start = i
    return groups


def _merged(nodes: np.ndarray, weights: np.ndarray, scale: float) -> np.ndarray:
    """Each probe's quadrature weights summed over nodes equal to rounding: the weight a
    null space's nodes share moves between them with the rounding of their order."""
    sums = []
    for row_nodes, row_weights in zip(nodes, weights, strict=True):
        breaks = np.flatnonzero(np.diff(row_nodes) > 1e-10 * scale) + 1
        sums += [part.sum() for part in np.split(row_weights, breaks)]
    return np.array(sums)


def test_every_answer_equals_the_golden_file(found, stored):
    differ = []
    for key in sorted(set(found) & set(stored)):
        new, old = found[key], stored[key]
        if key.endswith(answers.COUNTS):
            if not np.all(new <= old):
                differ.append(f"{key}: {new} products, the golden file's {old}")
            continue
        if key.endswith("flat_vectors"):
            values = stored[key.replace("flat_vectors", "values")]
            new, old = (np.stack(_projectors(v, values)) for v in (new, old))
        if key.endswith("slq/weights"):
            nodes = stored[key.replace("weights", "nodes")]
            node_scale = float(np.max(np.abs(nodes)))
            new, old = (_merged(nodes, w, node_scale) for w in (new, old))
        scale = max(1.0, float(np.max(np.abs(old)))) if old.size else 1.0
        if new.shape != old.shape or not np.allclose(new, old, rtol=0, atol=ATOL * scale):
            gap = np.max(np.abs(new - old)) if new.shape == old.shape else "shape"
            differ.append(f"{key}: differs by {gap}")
    assert not differ, "\n".join(differ)
