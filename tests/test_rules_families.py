"""Each family on concrete graphs: the expected target appears (structure) and the
rewritten graph computes what `jax.jit` of the original does (meaning)."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from hlo_opt import capture, emit, rules
from helpers import assert_close, float_argnums, scalar_loss

R = np.random.default_rng(1)


def _rand(*shape):
    return jnp.asarray(R.standard_normal(shape), jnp.float32)


def rewrite(name, fn, *args, times=1):
    """Apply rule `name` `times` times (first match each time); check the meaning
    against jax.jit of `fn`; return the op counts of the result."""
    rule = rules.ALL[name]
    graph = capture.capture(fn, args).graph
    for _ in range(times):
        found = [m for m in rule.matches(graph) if rule.apply(graph, m) is not None]
        assert found, f"{name} does not apply"
        graph = rule.apply(graph, found[0]).check()
    assert_close(list(jax.jit(emit.to_callable(graph))(*args)),
                 jax.tree.leaves(jax.jit(fn)(*args)), 1e-5, name)
    return collections.Counter(n.op for n in graph.nodes)


def _conv(x, w, layout="NCHW", groups=1, padding="SAME"):
    spec = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}[layout]
    return lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=spec,
                                    feature_group_count=groups)


# algebra ----------------------------------------------------------------------------------

def test_algebra_factoring_a_shared_matmul_operand_leaves_one_dot():
    ops = rewrite("dot-factor-rhs", lambda x, a, b: jnp.tanh(x @ a + x @ b),
                  _rand(3, 4), _rand(4, 5), _rand(4, 5))
    assert ops["dot_general"] == 1 and ops["add"] == 1


def test_algebra_scalar_moves_onto_the_weight():
    ops = rewrite("scalar-onto-weight", lambda s, x, w: s * (x @ w),
                  _rand(), _rand(2, 3), _rand(3, 4))
    g = capture.capture(lambda s, x, w: s * (x @ w), (_rand(), _rand(2, 3), _rand(3, 4))).graph
    new = rules.ALL["scalar-onto-weight"].apply(g, rules.ALL["scalar-onto-weight"].matches(g)[0])
    (d,) = [n for n in new.nodes if n.op == "dot_general"]
    assert d.inputs[1].node.op == "mul" and ops["mul"] == 1


def test_algebra_matmul_reassociates():
    ops = rewrite("dot-assoc", lambda x, a, b: (x @ a) @ b, _rand(8, 2), _rand(2, 16), _rand(16, 3))
    assert ops["dot_general"] == 2


# concat / split ---------------------------------------------------------------------------

def test_three_qkv_matmuls_merge_into_one_with_a_split_tree():
    def qkv(x, q, k, v):
        return x @ q, x @ k, x @ v
    args = (_rand(4, 8), _rand(8, 8), _rand(8, 8), _rand(8, 8))
    ops = rewrite("merge-dots-shared-lhs", qkv, *args, times=2)
    assert ops["dot_general"] == 1 and ops["split"] == 2 and ops["concatenate"] == 2


def test_nasrnn_pair_becomes_one_matmul_on_concatenated_operands():
    ops = rewrite("merge-dot-pair", lambda x, h, a, b: jnp.tanh(x @ a + h @ b),
                  _rand(1, 6), _rand(1, 4), _rand(6, 5), _rand(4, 5))
    assert ops["dot_general"] == 1 and ops["concatenate"] == 2 and ops["add"] == 0


def test_convs_sharing_an_input_merge():
    ops = rewrite("merge-convs-shared-input", lambda x, a, b: (_conv(x, a), jax.nn.relu(_conv(x, b))),
                  _rand(1, 3, 6, 6), _rand(4, 3, 3, 3), _rand(2, 3, 3, 3))
    assert ops["conv_general_dilated"] == 1 and ops["split"] == 1


def test_split_of_concat_cancels():
    def f(x, y):
        a, b = jnp.split(jnp.concatenate([x, y], 1), [3], 1)
        return a * 2, b + 1
    ops = rewrite("split-of-concat", f, _rand(2, 3), _rand(2, 4))
    assert ops["split"] == 0 and ops["concatenate"] == 0


def test_elementwise_moves_across_concat():
    ops = rewrite("concat-of-unary", lambda x, y: jnp.concatenate([jnp.exp(x), jnp.exp(y)], 0),
                  _rand(2, 3), _rand(4, 3))
    assert ops["exp"] == 1


# layout -----------------------------------------------------------------------------------

def test_nchw_conv_becomes_nhwc_with_transposes_that_fold_onto_the_weight():
    x, w = _rand(1, 3, 8, 8), _rand(4, 3, 3, 3)
    ops = rewrite("conv-to-nhwc", lambda x, w: jax.nn.relu(_conv(x, w)), x, w)
    assert ops["transpose"] == 3 and ops["conv_general_dilated"] == 1
    g = capture.capture(lambda x, w: jax.nn.relu(_conv(x, w)), (x, w)).graph
    rule = rules.ALL["conv-to-nhwc"]
    new = rule.apply(g, rule.matches(g)[0])
    (conv,) = [n for n in new.nodes if n.op == "conv_general_dilated"]
    assert conv.params["dimension_numbers"].lhs_spec == (0, 3, 1, 2)     # NHWC


def test_transposes_cancel_through_an_elementwise_op():
    def f(x):
        return jnp.transpose(jnp.tanh(jnp.transpose(x, (0, 2, 3, 1))), (0, 3, 1, 2))
    x = _rand(1, 2, 3, 4)
    g = capture.capture(f, (x,)).graph
    for name in ("transpose-through-unary", "transpose-cancel"):
        rule = rules.ALL[name]
        g = rule.apply(g, rule.matches(g)[0])
    assert [n.op for n in g.nodes] == ["input", "tanh"]
    assert_close(list(emit.run(g, [x])), [jax.jit(f)(x)], 1e-6)


def test_a_transposed_weight_folds_into_the_dot():
    ops = rewrite("dot-fold-rhs-transpose", lambda x, w: x @ w.T, _rand(2, 3), _rand(5, 3))
    assert ops["transpose"] == 0 and ops["dot_general"] == 1


# conv -------------------------------------------------------------------------------------

@pytest.mark.parametrize("groups", [2, 4, 8])
def test_grouped_conv_becomes_one_dense_block_diagonal_conv(groups):
    x, w = _rand(1, 8, 5, 5), _rand(16, 8 // groups, 3, 3)
    ops = rewrite("grouped-conv-to-dense", lambda x, w: _conv(x, w, groups=groups), x, w)
    assert ops["conv_general_dilated"] == 1 and ops["pad"] == groups


def test_grouped_conv_halves_down_to_plain_convs():
    x, w = _rand(1, 8, 5, 5), _rand(8, 2, 3, 3)
    ops = rewrite("grouped-conv-halve", lambda x, w: _conv(x, w, groups=4), x, w, times=3)
    assert ops["conv_general_dilated"] == 4


def test_enlarged_1x1_kernel_then_merged_with_its_3x3_sibling():
    x, w1, w3 = _rand(1, 4, 6, 6), _rand(5, 4, 1, 1), _rand(3, 4, 3, 3)
    f = lambda x, w1, w3: (_conv(x, w1), _conv(x, w3))       # noqa: E731
    g = capture.capture(f, (x, w1, w3)).graph
    for name in ("enlarge-kernel", "merge-convs-shared-input"):
        rule = rules.ALL[name]
        good = [m for m in rule.matches(g) if rule.apply(g, m) is not None]
        g = rule.apply(g, good[0]).check()
    assert sum(n.op == "conv_general_dilated" for n in g.nodes) == 1
    assert_close(list(emit.run(g, [x, w1, w3])), list(jax.jit(f)(x, w1, w3)), 1e-5)


@pytest.mark.parametrize("stride,padding", [(1, "SAME"), (2, "SAME"), (2, ((0, 1), (0, 1))),
                                            (2, "VALID")])
def test_3x3_conv_becomes_one_matmul_over_its_windows(stride, padding):
    x, w = _rand(1, 7, 7, 5), _rand(3, 3, 5, 4)

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    ops = rewrite("conv3x3-as-im2col", conv, x, w)
    assert ops["conv_general_dilated"] == 0 and ops["dot_general"] == 1 and ops["slice"] == 9
    assert ops["pad"] == 1          # the nine windows read one padded input


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv_becomes_nine_taps_of_one_padded_input(stride):
    x, w = _rand(1, 7, 7, 5), _rand(3, 3, 1, 5)

    def depthwise(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        feature_group_count=5)
    ops = rewrite("depthwise-conv3x3-as-taps", depthwise, x, w)
    assert ops["conv_general_dilated"] == 0 and ops["mul"] == 9 and ops["slice"] == 18
    assert ops["pad"] == 1


def test_average_pool_is_a_depthwise_conv():
    def pool(x):
        return lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 2, 2), "SAME") / 9
    ops = rewrite("avgpool-as-conv", pool, _rand(2, 3, 7, 7))
    assert ops["conv_general_dilated"] == 1 and ops["reduce_window_sum"] == 0


# fusion -----------------------------------------------------------------------------------

def test_relu_of_each_half_becomes_one_relu_before_the_split():
    def f(x):
        a, b = jnp.split(x, [3], 1)
        return jax.nn.relu(a), jax.nn.relu(b)
    ops = rewrite("unary-before-split", f, _rand(2, 5))
    assert ops["relu"] == 1 and ops["split"] == 1


def test_bias_of_each_half_becomes_one_add_on_a_concatenated_bias():
    def f(x, c, d):
        a, b = jnp.split(x, [2], 1)
        return a + c, b + d
    ops = rewrite("binary-before-split", f, _rand(3, 5), _rand(3, 2), _rand(3, 3))
    assert ops["add"] == 1 and ops["concatenate"] == 1


# widening dots and convs ------------------------------------------------------------------

def _dot(p, q, out):
    return lax.dot_general(p, q, (((1,), (0,)), ((), ())), preferred_element_type=out)


def _conv_to(p, q, out):
    return lax.conv_general_dilated(p, q, (1, 1), "SAME", preferred_element_type=out)


MOVE_ACROSS = [   # rule, program (its dots' and convs' output type `out`), argument shapes
    ("dot-factor-rhs", lambda out: lambda x, a, b: _dot(x, a, out) + _dot(x, b, out),
     [(3, 4), (4, 5), (4, 5)]),
    ("dot-factor-lhs", lambda out: lambda x, y, a: _dot(x, a, out) + _dot(y, a, out),
     [(3, 4), (3, 4), (4, 5)]),
    ("dot-distribute-rhs", lambda out: lambda x, a, b: _dot(x, a + b, out),
     [(3, 4), (4, 5), (4, 5)]),
    ("dot-distribute-lhs", lambda out: lambda x, y, a: _dot(x + y, a, out),
     [(3, 4), (3, 4), (4, 5)]),
    ("dot-assoc", lambda out: lambda x, a, b: _dot(_dot(x, a, out), b, out),
     [(3, 4), (4, 5), (5, 2)]),
    ("dot-assoc-rev", lambda out: lambda x, a, b: _dot(x, _dot(a, b, out), out),
     [(3, 4), (4, 5), (5, 2)]),
    ("scalar-out-of-dot-lhs", lambda out: lambda s, x, w: _dot(s * x, w, out),
     [(), (3, 4), (4, 5)]),
    ("scalar-out-of-dot-rhs", lambda out: lambda s, x, w: _dot(x, s * w, out),
     [(), (3, 4), (4, 5)]),
    ("scalar-onto-weight", lambda out: lambda s, x, w: s.astype(out) * _dot(x, w, out),
     [(), (3, 4), (4, 5)]),
    ("conv-factor-kernel", lambda out: lambda x, a, b: _conv_to(x, a, out) + _conv_to(x, b, out),
     [(1, 2, 5, 5), (3, 2, 3, 3), (3, 2, 3, 3)]),
    ("conv-factor-input", lambda out: lambda x, y, w: _conv_to(x, w, out) + _conv_to(y, w, out),
     [(1, 2, 5, 5), (1, 2, 5, 5), (3, 2, 3, 3)]),
    ("conv-linear-kernel", lambda out: lambda x, a, b: _conv_to(x, a + b, out),
     [(1, 2, 5, 5), (3, 2, 3, 3), (3, 2, 3, 3)]),
    ("conv-linear-input", lambda out: lambda x, y, w: _conv_to(x + y, w, out),
     [(1, 2, 5, 5), (1, 2, 5, 5), (3, 2, 3, 3)]),
]


@pytest.mark.parametrize("name, program, shapes", MOVE_ACROSS, ids=[c[0] for c in MOVE_ACROSS])
def test_sums_and_scales_stay_on_their_side_of_a_widening_dot_or_conv(name, program, shapes):
    """int8 operands into int32 results: moved across, an add or scale would wrap in
    int8 where the original's does not (or the other way round). Within one type, int32
    throughout, the rule applies and the result is exact, wrapping and all."""
    def matches(operands, out):
        args = [jnp.asarray(R.integers(-128, 128, s), operands) for s in shapes]
        graph = capture.capture(program(out), args).graph
        return [m for m in rules.ALL[name].matches(graph)], graph, args
    found, _, _ = matches(jnp.int8, jnp.int32)
    assert not found, f"{name} moved arithmetic across an int8 -> int32 {name.split('-')[0]}"
    found, graph, args = matches(jnp.int32, jnp.int32)
    assert found, f"{name} should apply where operands and result share a type"
    new = rules.ALL[name].apply(graph, found[0]).check()
    big = [a * (1 << 24) for a in args]        # products past 2^31: both sides wrap alike
    want = jax.jit(program(jnp.int32))(*big)
    assert np.array_equal(jax.jit(emit.to_callable(new))(*big)[0], want)


def every_rewrite(family, draw):
    """(rule, its example at n=0, arguments `draw(shapes)`, the rewritten graph) at
    every match of every rule of `family`; asserts each rule rewrote at least once."""
    for rule in rules.ALL.family(family):
        fn, shapes = rule.example(0)
        args = draw(shapes)
        graph = capture.capture(fn, args).graph
        found = [new for new in (rule.apply(graph, m) for m in rule.matches(graph))
                 if new is not None]
        assert found, f"{rule.name} does not rewrite its own example"
        for new in found:
            yield rule, fn, args, new.check()


@pytest.mark.parametrize("family", ["algebra", "conv"])
def test_the_arithmetic_rules_are_exact_on_integers_that_wrap(family):
    """z3 proves the identities over the reals; within one integer type they must hold
    bit for bit, overflow and all (arithmetic modulo 2^32 is a ring). Each rule's own
    example, on int32 arguments past 2^20 (their products wrap), at every match."""
    def wrapping(shapes):
        return [jnp.asarray(R.integers(-200, 200, s) << 20, jnp.int32) for s in shapes]
    for rule, fn, args, new in every_rewrite(family, wrapping):
        got = jax.jit(emit.to_callable(new))(*args)
        assert all(map(np.array_equal, got, jax.tree.leaves(jax.jit(fn)(*args)))), rule.name


@pytest.mark.parametrize("family", ["algebra", "conv", "fusion"])
def test_gradients_flow_through_every_rewrite(family):
    """A node a rule builds binds its primitive as jax's own function does: a `mul`
    built without `out_dtype` computed, but its transpose failed under `grad`
    (`jax.grad(hlo_opt.jit(f))` raised TypeError where `jax.grad(jax.jit(f))` ran).
    Each rule's own example, every match: the rewritten graph's gradients are the
    original's."""
    def grads(f, args):
        argnums = float_argnums(args)
        return jax.grad(scalar_loss(f, args, argnums), argnums=tuple(range(len(argnums))))(
            *[args[i] for i in argnums])
    for rule, fn, args, new in every_rewrite(family, lambda shapes: [_rand(*s) for s in shapes]):
        assert_close(list(grads(emit.to_callable(new), args)), list(grads(fn, args)), 1e-4,
                     rule.name)
