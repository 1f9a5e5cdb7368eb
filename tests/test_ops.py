"""The op table: NumPy references agree with the JAX emitters, type inference agrees
with jax, the corpus covers every op, FLOP counts follow their formulas."""
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from corpus import CASES
from hlo_opt import capture, ops
from hlo_opt.ir import GraphError, Node, TensorType


def _graph(case, seed=0):
    return capture.capture(case.fn, case.args(seed), static_argnums=case.static_argnums).graph


def _tolerance(dtype):
    return (2e-2, 2e-2) if np.dtype(dtype).itemsize <= 2 else (2e-5, 2e-5)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_numpy_reference_matches_jax_node_by_node(case):
    """Every non-opaque node's NumPy reference, fed the JAX values of its inputs,
    reproduces the JAX emitter's output."""
    graph = _graph(case)
    leaves, _, _ = capture.split_static(case.args(), {}, case.static_argnums, ())
    checked = []

    def apply(node, args):
        outs = ops.get(node.op).emit(node, *args)
        if node.op not in ("opaque",) and all(np.dtype(t.dtype).kind != "V" or
                                              t.dtype == jnp.bfloat16 for t in node.types):
            refs = ops.get(node.op).reference(node, *[np.asarray(a) for a in args])
            for got, want, ty in zip(refs, outs, node.types):
                want = np.asarray(jnp.asarray(want))   # weak literals are Python scalars
                assert got.shape == want.shape and got.dtype == want.dtype, node.op
                rtol, atol = _tolerance(ty.dtype)
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                           rtol=rtol, atol=atol, equal_nan=True,
                                           err_msg=f"{case.name}: {node.op}")
            checked.append(node.op)
        return outs

    graph.evaluate(leaves, apply)
    assert checked


def test_corpus_covers_every_op():
    used = set()
    for case in CASES:
        used |= {n.op for n in _graph(case).nodes}
    assert set(ops.OPS) - {"input"} <= used, sorted(set(ops.OPS) - used)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_type_inference_agrees_with_captured_types(case):
    _graph(case).check()     # re-infers every node; raises on any disagreement


def test_check_names_a_node_with_a_wrong_type():
    x = Node("input", (), {"index": 0}, (TensorType((2, 3), np.dtype("float32")),))
    bad = Node("exp", (x.out(),), {"accuracy": None}, (TensorType((3, 2), np.dtype("float32")),))
    from hlo_opt.ir import Graph
    with pytest.raises(GraphError, match="exp"):
        Graph([x], [bad.out()]).check()


def test_unknown_primitive_has_no_table_entry():
    assert ops.lookup_primitive(lax.cumsum_p) is None
    assert ops.lookup_primitive(lax.add_p).name == "add"


def _node_of(fn, *args):
    graph = capture.capture(fn, args).graph
    return next(n for n in graph.nodes if n.op not in ("input", "const"))


def test_flop_counts():
    a, b = jnp.ones((8, 16)), jnp.ones((16, 4))
    assert ops.get("dot_general").flops(_node_of(jnp.dot, a, b)) == 2 * 8 * 16 * 4
    x, w = jnp.ones((1, 6, 10, 10)), jnp.ones((4, 3, 3, 3))      # 2 groups
    node = _node_of(lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", feature_group_count=2), x, w)
    assert ops.get(node.op).flops(node) == 2 * (1 * 4 * 10 * 10) * (3 * 3 * 3)
    node = _node_of(jnp.exp, a)
    assert ops.get("exp").flops(node) == 8 * 16
    assert ops.get("exp").bytes(node) == 2 * 8 * 16 * 4
    node = _node_of(jnp.transpose, a)
    assert ops.get("transpose").flops(node) == 0


def test_made_nodes_types_are_inferred_once_per_op_types_and_params():
    from hlo_opt.ops import _inferred
    _inferred.cache_clear()      # other tests may have made these ops on these types
    x = Node("input", (), {"index": 0}, (TensorType((2, 3), np.dtype("float32")),))
    first = ops.make("transpose", [x.out()], permutation=(1, 0))
    again = ops.make("transpose", [x.out()], permutation=(1, 0))
    other = ops.make("reduce_sum", [x.out()], axes=(1,), out_sharding=None)
    assert first.types == again.types == (TensorType((3, 2), np.dtype("float32")),)
    info = _inferred.cache_info()
    assert (info.hits, info.misses) == (1, 2)                  # the second, not the third
    assert other.types == (TensorType((2,), np.dtype("float32")),)
    # what the cache returns is what jax infers
    assert ops.get("transpose").infer([x.types[0]], first.params) == again.types
