"""The hand-made variants of the cost-fidelity benchmark compute the original function."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import models
import variants as V
from hlo_opt import capture, emit
from hlo_opt.cost import measure
from helpers import assert_close

R = np.random.default_rng(0)


def _rand(*shape):
    return jnp.asarray(R.standard_normal(shape), jnp.float32)


def _same_function(g1, g2, args, rtol=1e-5):
    assert g1.digest != g2.digest
    assert_close(emit.run(g2, args), emit.run(g1, args), rtol)


def test_to_nhwc_keeps_the_function_and_changes_the_layout():
    def f(x, w):
        return jax.nn.relu(lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                                    dimension_numbers=("NCHW", "OIHW", "NCHW")))
    args = (_rand(2, 3, 9, 9), _rand(5, 3, 3, 3))
    g = capture.capture(f, args).graph
    v = V.to_nhwc(g, V.nchw_convs(g))
    assert not V.nchw_convs(v) and sum(n.op == "transpose" for n in v.nodes) == 3
    _same_function(g, v, args)


def test_merge_dots_on_shared_operand():
    def f(x, a, b, c):
        return jnp.tanh(x @ a) + x @ b, x @ c
    args = (_rand(4, 8), _rand(8, 3), _rand(8, 3), _rand(8, 5))
    g = capture.capture(f, args).graph
    (group,) = V.dot_groups(g)
    assert len(group) == 3
    merged = V.merge_dots(g, group)
    assert sum(n.op == "dot_general" for n in merged.nodes) == 1
    _same_function(g, merged, args)
    partial = V.merge_dots(g, group[:2])
    assert sum(n.op == "dot_general" for n in partial.nodes) == 2
    _same_function(g, partial, args)


def test_merge_pair_concatenates_both_operands():
    def f(x, h, a, b, c):
        shared = h @ c                       # read twice: not a pair to merge
        return jnp.tanh(x @ a + h @ b), shared + x @ a, shared * 2
    args = (_rand(2, 8), _rand(2, 4), _rand(8, 5), _rand(4, 5), _rand(4, 5))
    g = capture.capture(f, args).graph
    (add,) = V.dot_pairs(g)
    merged = V.merge_pair(g, add)
    assert not V.dot_pairs(merged)
    assert sum(n.op == "dot_general" for n in merged.nodes) == 3
    assert sorted(n.params["dimension"] for n in merged.nodes if n.op == "concatenate") == [0, 1]
    _same_function(g, merged, args)


@pytest.mark.parametrize("k", [2, 4])
def test_split_dots_in_column_pieces(k):
    def f(x, a, b, c):            # b reads a's dot: both split at once
        return jnp.tanh(x @ a) @ b + x @ c
    args = (_rand(3, 8), _rand(8, 16), _rand(16, 8), _rand(8, 8))
    g = capture.capture(f, args).graph
    assert len(V.plain_dots(g)) == 3
    v = V.split_dots(g, V.plain_dots(g)[:2], k)
    dots = [n for n in v.nodes if n.op == "dot_general"]
    assert len(dots) == 2 * k + 1
    assert sum(n.op == "concatenate" for n in v.nodes) == 2
    _same_function(g, v, args)


def test_weights_nk_turns_a_share_of_the_frozen_weights_only():
    def f(a, b, c, x):                       # a, b, c frozen; x @ x.T reads no weight
        return jnp.tanh(x @ a) @ b + x @ c, x @ x.T
    args = (_rand(8, 8), _rand(8, 6), _rand(8, 6), _rand(4, 8))
    g = capture.capture(f, args).graph

    class Half:
        def choice(self, seq):
            return 0.5 if 0.5 in seq else seq[0]

        def sample(self, seq, k):
            return list(seq)[:k]

    def turned(v):                           # dots contracting the weight's second axis
        return sum(n.op == "dot_general" and n.params["dimension_numbers"][0][1] == (1,)
                   for n in v.nodes)
    name, v = V.weights_nk(g, range(3), Half())
    assert name == "nk-50%" and turned(v) == turned(g) + 2
    _same_function(g, v, args)
    name, v = V.weights_nk(g, (), Half())
    assert name == "" and v is g


@pytest.mark.parametrize("k", [2, 4])
def test_split_grouped_conv(k):
    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=4,
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    args = (_rand(1, 8, 6, 6), _rand(12, 2, 3, 3))
    g = capture.capture(f, args).graph
    v = V.split_conv(g, V.grouped_convs(g)[0], k)
    convs = [n for n in v.nodes if n.op == "conv_general_dilated"]
    assert len(convs) == k and all(c.params["feature_group_count"] == 4 // k for c in convs)
    _same_function(g, v, args)


@pytest.mark.parametrize("name, family", [("resnext50", "split"), ("nasrnn", "pair"), ("bert", "split-"),
                                          ("sru", "narrow"), ("squeezenet", "rules:nhwc+")])
def test_zoo_variants_are_distinct_and_equivalent(name, family):
    fn, params, inputs = models.build(name, small=True)
    args = jax.tree.leaves((params, *inputs))
    g = capture.capture(fn, (params, *inputs)).graph
    found = V.variants(g, count=6)
    assert len(found) == 6 and found[0] == ("original", g)
    assert len({v.digest for _, v in found}) == 6
    assert any(label.startswith(family) for label, _ in found)
    want = emit.run(g, args)
    for label, v in found[1:]:
        assert_close(jax.jit(emit.to_callable(v))(*args), want, 1e-5, label)


def test_conv_moves_take_a_share_of_each_rules_matches():
    def f(x, a, b):
        y = lax.conv_general_dilated(x, a, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        for _ in range(3):
            y = jax.nn.relu(lax.conv_general_dilated(y, b, (1, 1), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return y
    args = (_rand(1, 6, 6, 4), _rand(1, 1, 4, 8), _rand(3, 3, 8, 8))
    g = capture.capture(f, args).graph

    class Shares:                   # all of the 1x1 convs, a third of the three 3x3 ones
        shares = iter([1.0, 0.0, 1 / 3, 0.0])     # in the order of V.CONV_MOVES

        def choice(self, seq):
            return next(self.shares)

        def sample(self, seq, k):
            return list(seq)[:k]
    name, v = V.conv_moves(g, Shares())
    assert name == "conv1x1-as-dot-100%+conv3x3-as-im2col-33%"
    assert sum(n.op == "conv_general_dilated" for n in v.nodes) == 2
    _same_function(g, v, args, rtol=1e-4)


def test_only_short_programs_that_fit_the_cache_budget_are_replicated():
    small = capture.capture(lambda x: x * 2, (_rand(16),)).graph
    big = capture.capture(lambda x: x * 2, (jnp.zeros((1024, 1024)),)).graph   # 8 MiB in+out
    assert measure.replicas(small) == measure.COPIES
    assert measure.replicas(big) == 1


def test_replicated_program_runs_independent_copies():
    g = capture.capture(lambda x, y: (x * y).sum(), (_rand(3), _rand(3))).graph
    r = measure.replicate(g, 3)
    assert len(r.inputs) == 6 and len(r.outputs) == 3
    args = [_rand(3) for _ in range(6)]
    got = emit.run(r, args)
    for i in range(3):
        assert_close([got[i]], emit.run(g, args[2 * i:2 * i + 2]), 1e-6)
