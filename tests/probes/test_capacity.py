"""The foundation-scale page's table (docs/guide/foundation_scale.md) is the library's own
estimates: the vectors each probe keeps are those its memory plan counts, and the page shows
`capacity.table()` as it is."""

import pathlib

from landscape.core import eigen_search, memory, three_term
from landscape.probes import capacity

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "foundation_scale.md"


def test_the_largest_dim_solves_the_memory_policy_for_the_probes_vectors():
    top5, three = capacity.PROBES[0], capacity.PROBES[-1]
    assert top5.kept_bytes(4) == eigen_search.lanczos_search_bytes(1, 20, 4) == (20 + 2.5 + 3) * 4
    # three vectors on a node's mesh, products on pytrees split as the parameters: the previous
    # vector beside the product's two (the current one is its v), or both kept in bfloat16
    assert three_term.vector_bytes(1, 4, "three", 30, None) == 8  # flat vectors: both kept
    assert three.kept_bytes(4) == three_term.vector_bytes(1, 4, "three", 30, None, True) == 4
    assert three.kept_bytes(4, "bfloat16") == 2 + 2
    # the search's 20 vectors in bfloat16: 2 bytes each, a restart's block read back and
    # rotated in float32 (20 / 16 x (2 + 4 + 4)), a step's three vectors in float32
    assert top5.kept_bytes(4, "bfloat16") == 20 * 2 + 20 / 16 * 10 + 3 * 4
    room = memory.MEMORY_FRACTION * capacity.H200_BYTES * 8
    product = 3.02 * 4  # v and H v, one as the parameters lie, and a largest leaf of 2% of D
    assert capacity.largest_dim(top5, 8) == int(room // (product + 102))
    assert capacity.largest_dim(three, 8, storage="bfloat16") == int(room // (product + 4))
    # a model whose largest leaf is nearly all of D (a wide two-layer MLP): four vectors
    assert capacity.largest_dim(three, 8, largest_leaf=1.0) == int(room // (16 + 4))
    # activations take their bytes off every device's room
    lowered = capacity.largest_dim(three, 8, activations=capacity.GIB)
    assert lowered == int((room - 8 * capacity.GIB) // (product + 4))
    assert capacity.largest_dim(three, 8, activations=capacity.H200_BYTES) == 0


def test_a_node_holds_slq_in_three_vectors_at_7e10_with_its_whole_memory():
    # HessFormer's model (D = 7e10) on 8 H200s, float32 or bfloat16 vectors: 16.1 bytes a
    # parameter beside the parameters, where a node's 1.19e12 bytes allow 17.1
    three = capacity.PROBES[-1]
    for storage in (None, "bfloat16"):
        assert capacity.largest_dim(three, 8, storage=storage, fraction=1.0) >= 7e10


def test_a_node_holds_a_top5_at_1e10_only_with_its_whole_memory():
    top5 = capacity.PROBES[0]
    assert capacity.largest_dim(top5, 8) < 1e10 <= capacity.largest_dim(top5, 8, fraction=1.0)
    assert 1e10 <= capacity.largest_dim(top5, 32)
    # bfloat16 vectors: 1.6e10 with the whole memory, 7.8e9 at the half
    half = capacity.largest_dim(top5, 8, storage="bfloat16")
    assert 7e9 <= half < 1e10 < 1.5e10 <= capacity.largest_dim(top5, 8, storage="bfloat16",
                                                                fraction=1.0)  # fmt: skip


def test_the_page_shows_the_table():
    text = PAGE.read_text()
    start = text.index("<!-- capacity table -->\n") + len("<!-- capacity table -->\n")
    assert text[start : text.index("\n<!-- end capacity table -->")] == capacity.table()
