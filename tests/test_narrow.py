"""The narrowing move: slices moved toward the inputs, past ops only they read; the
answers stay those of jax.jit of the original."""
import collections

import jax
import jax.numpy as jnp
import numpy as np

import models
from hlo_opt import capture, cost, emit, rules
from hlo_opt.search import narrow, search
from helpers import assert_close

R = np.random.default_rng(5)


def _rand(*shape):
    return jnp.asarray(R.standard_normal(shape), jnp.float32)


def _dots(graph):
    return [n.types[0].shape for n in graph.nodes if n.op == "dot_general"]


def test_the_last_sru_layer_is_computed_at_the_last_step_only():
    """The classifier reads the last step: the other steps' outputs of the last layer
    are gone, and its output gate projects one row of the sequence, not six."""
    fn, params, (tokens,) = models.build("sru", small=True)
    g = capture.capture(fn, (params, tokens)).graph
    new, applied = narrow.narrow(g, list(rules.ALL))
    seq = tokens.shape[1]
    assert sorted(_dots(g)).count((1, seq, 32)) == 6
    assert sorted(_dots(new)).count((1, seq, 32)) == 5 and (1, 1, 32) in _dots(new)
    assert "slice-through-dot" in applied and f"slice-of-stack-{seq}" in applied
    assert sum(n.op == "tanh" for n in new.nodes) < sum(n.op == "tanh" for n in g.nodes)
    args = jax.tree.leaves((params, tokens))
    assert_close(emit.run(new, args), [jax.jit(fn)(params, tokens)], 1e-5)


def test_a_slice_does_not_move_above_an_op_that_others_read():
    """Two slices of one matmul's rows: moving either would compute the matmul twice."""
    def two_rows(x, w):
        y = jnp.tanh(x @ w)
        return y[0], y[1] * 2
    args = (_rand(4, 8), _rand(8, 3))
    g = capture.capture(two_rows, args).graph
    assert narrow.narrow(g, list(rules.ALL)) is None
    one = capture.capture(lambda x, w: jnp.tanh(x @ w)[1:3], args).graph
    new, applied = narrow.narrow(one, list(rules.ALL))
    assert _dots(new) == [(2, 3)] and applied == ["unary-through-slice", "slice-through-dot"]
    assert_close(emit.run(new, args), [jax.jit(lambda x, w: jnp.tanh(x @ w)[1:3])(*args)], 1e-5)


def test_the_search_starts_from_the_narrowed_graph_only_when_it_is_cheaper():
    fn, params, (tokens,) = models.build("sru", small=True)
    g = capture.capture(fn, (params, tokens)).graph
    n_frozen = len(jax.tree.leaves(params))
    model = cost.Analytic()
    kw = dict(algorithm="greedy", budget=2, time_limit=None, split_threshold=None)
    r = search(g, rules.ALL, lambda h: model.cost(h, range(n_frozen)).total, **kw)
    assert "slice-through-dot" in r.applied and r.cost < r.stats["start_cost"]

    def dearer_when_smaller(h):          # a cost under which narrowing never pays
        return 1.0 / len(h.nodes)
    r = search(g, rules.ALL, dearer_when_smaller, **kw)
    assert not any(name in r.applied for name in narrow.PUSH)
    assert collections.Counter(n.op for n in r.graph.nodes)["dot_general"] >= 7


def _tanhs(graph):
    return sum(n.op == "tanh" for n in graph.nodes)


def test_the_first_sru_layer_computes_its_outputs_once_on_the_stacked_cells():
    """`r_t * tanh(c_t) + (1 - r_t) * x_t` for each step, then stacked, becomes one
    elementwise computation on the stacked cell states, gates and inputs."""
    fn, params, (tokens,) = models.build("sru", small=True)
    g = capture.capture(fn, (params, tokens)).graph
    narrowed, _ = narrow.narrow(g, list(rules.ALL))
    new, applied = narrow.vectorize(narrowed, list(rules.ALL))
    seq = tokens.shape[1]
    # left: the stacked one, the last layer's at its last step, and the first layer's at
    # the last step, which the last layer also reads on its own (its `x_t`)
    assert _tanhs(g) == 2 * seq and _tanhs(narrowed) == seq + 1 and _tanhs(new) == 3
    assert {f"stack-of-slices-{seq}", f"stack-of-unary-{seq}",
            f"stack-of-scalar-lhs-op-{seq}"} <= set(applied)
    assert narrow.vectorize(new, list(rules.ALL)) is None
    args = jax.tree.leaves((params, tokens))
    assert_close(emit.run(new, args), [jax.jit(fn)(params, tokens)], 1e-5)


def test_steps_that_differ_are_not_stacked_as_one():
    """Different scalars per step, and slices out of order, stay as they are."""
    a, b = _rand(2, 3), _rand(2, 3)
    scaled = capture.capture(lambda a, b: jnp.stack([a * 0.5, b * 0.25]), (a, b)).graph
    assert narrow.vectorize(scaled, list(rules.ALL)) is None
    same = capture.capture(lambda a, b: jnp.stack([a * 0.5, b * 0.5]), (a, b)).graph
    new, applied = narrow.vectorize(same, list(rules.ALL))
    assert applied == ["stack-of-scalar-rhs-op-2"]
    assert_close(emit.run(new, (a, b)), [jnp.stack([a * 0.5, b * 0.5])], 1e-6)
    swapped = capture.capture(lambda x: jnp.stack([x[1], x[0]]), (a,)).graph
    assert narrow.vectorize(swapped, list(rules.ALL)) is None
