"""YNNPACK's library fusions under `compile_options.YNN_ELTWISE` (`cost/library.py`)
against the HLO XLA compiles: each fusion's convs and dots, and the contractions left
to XLA, must be those `library.groups` predicts; the partition keeps each as one kernel."""
import collections
import re

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from hlo_opt import capture, compile_options, cost, emit
from hlo_opt.cost import layouts, library
from hlo_opt.cost import partition as part

pytestmark = pytest.mark.skipif(
    jax.devices()[0].platform != "cpu"
    or not compile_options.accepted(compile_options.label(compile_options.YNN_ELTWISE)),
    reason="YNNPACK's elementwise fusions are XLA CPU's")
NHWC = ("NHWC", "HWIO", "NHWC")
CONTRACTIONS = ("conv_general_dilated", "dot_general")


def conv(x, w, **kw):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC, **kw)


def separable(x, dw, pw, s, b, y, m):
    """NASNet-A's branch: relu, depthwise conv, 1x1 conv, scale and shift; a dot after."""
    h = conv(jax.nn.relu(x), dw, feature_group_count=x.shape[-1])
    h = conv(h, pw) * s + b
    return h + y, jnp.tanh(h.reshape(-1, 64) @ m)


def two_readers(x, w):
    """A conv whose result has two readers, and a relu whose result has two: XLA
    fuses neither conv."""
    c = conv(x, w)
    r = jax.nn.relu(x)
    return jax.nn.relu(c), c * 2.0, conv(r, w), r


def attention(q, k, v):
    """BERT's: the dot decomposer transposes both dots' operands; the scores' dot joins
    the division after it, the values' dot (read by a transpose) is XLA's."""
    s = lax.dot_general(q, k, (((3,), (3,)), ((0, 2), (0, 2)))) / 8.0
    return lax.dot_general(v, s, (((1,), (3,)), ((0, 2), (0, 1)))).transpose(0, 3, 1, 2)


def small_and_transposed(x, w, a, b):
    """A relu on fewer than 4096 floats starts no fusion; a dot of a transposed lhs
    (XLA folds the transpose into the dot) is not YNNPACK's."""
    return jax.nn.relu(conv(x, w)), jnp.tanh(a.T @ b)


ones = jnp.ones
CASES = {
    "separable": (separable, (ones((1, 28, 28, 64)), ones((3, 3, 1, 64)), ones((1, 1, 64, 64)),
                              ones((64,)), ones((64,)), ones((1, 28, 28, 64)), ones((64, 64)))),
    "two_readers": (two_readers, (ones((1, 16, 16, 32)), ones((3, 3, 32, 32)))),
    "attention": (attention, (ones((1, 64, 16, 64)),) * 3),
    "small_and_transposed": (small_and_transposed, (ones((1, 4, 4, 8)), ones((3, 3, 8, 8)),
                                                    ones((64, 64)), ones((64, 64)))),
}


def _fused(text: str) -> tuple[list, int]:
    """From compiled HLO: (convs, dots) of each YNNPACK fusion that has any, sorted, and
    the convs and dots outside them."""
    body, inside = {}, None
    for line in text.splitlines():
        if m := re.match(r"^(%\S+) ", line):
            inside = body[m.group(1)] = collections.Counter()
        elif line.startswith("ENTRY"):
            inside = None
        elif inside is not None:
            inside["conv"] += " convolution(" in line
            inside["dot"] += " dot(" in line
    entry = text.split("\nENTRY", 1)[1].splitlines()
    groups, loose = [], 0
    for line in entry:
        if " fusion(" in line and "ynn_fusion" in line:
            c = body["%" + re.search(r"calls=%([\w.\-]+)", line).group(1)]
            if c["conv"] + c["dot"]:
                groups.append((c["conv"], c["dot"]))
        loose += " convolution(" in line or " dot(" in line
    return sorted(groups), loose


def _predicted(graph) -> tuple[list, int]:
    groups = library.groups(graph)
    inside = {n for g in groups for n in g}
    counts = [tuple(sum(n.op == op for n in g) for op in CONTRACTIONS) for g in groups]
    return (sorted(c for c in counts if sum(c)),
            sum(n.op in CONTRACTIONS and n not in inside for n in graph.nodes))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_predicted_library_fusions_are_those_xla_compiles(name):
    fn, args = CASES[name]
    graph = capture.capture(fn, args).graph
    text = compile_options.jit(emit.to_callable(graph), compile_options.YNN_ELTWISE) \
        .lower(*args).compile().as_text()
    assert _predicted(graph) == _fused(text)


def test_the_expected_fusions_are_predicted():
    """The cases above say what they test: (convs, dots) per fusion, and loose ones."""
    found = {name: _predicted(capture.capture(fn, args).graph)
             for name, (fn, args) in CASES.items()}
    assert found == {"separable": ([(0, 1), (2, 0)], 0), "two_readers": ([], 2),
                     "attention": ([(0, 1)], 1), "small_and_transposed": ([], 2)}


def test_the_partition_keeps_a_library_fusion_one_kernel_and_isolated_it_is_one_call():
    fn, args = CASES["separable"]
    graph = capture.capture(fn, args).graph
    plain = part.partition(graph, conv_layouts=True)
    kernels = part.partition(graph, conv_layouts=True, library_fusion=True)
    assert max(sum(n.op == "conv_general_dilated" for n in k.nodes) for k in plain) == 1
    (both,) = [k for k in kernels if sum(n.op == "conv_general_dilated" for n in k.nodes) == 2]
    assert both.kind == "contract" and {"relu", "add", "mul"} <= {n.op for n in both.nodes}
    assert collections.Counter(n for k in kernels for n in k.nodes) == collections.Counter(
        n for k in plain for n in k.nodes)
    program = part.isolate(both)
    shapes = [jax.ShapeDtypeStruct(n.types[0].shape, n.types[0].dtype) for n in program.inputs]
    text = compile_options.jit(emit.to_callable(program), compile_options.YNN_ELTWISE) \
        .lower(*shapes).compile().as_text()
    assert _fused(text) == ([(2, 0)], 0)


def test_loops_do_not_join_a_library_fusion():
    """A transpose of the fusion's result is a copy kernel of its own (XLA's loop
    fusion runs after the library rewriter and cannot reach into a library call)."""
    def f(x, w):
        return jnp.tanh(conv(x, w)).transpose(0, 3, 1, 2)
    graph = capture.capture(f, (ones((1, 16, 16, 32)), ones((3, 3, 32, 32)))).graph
    kernels = part.partition(graph, library_fusion=True)
    assert [sorted(n.op for n in k.nodes) for k in kernels] == [
        ["conv_general_dilated", "tanh"], ["transpose"]]
    assert [sorted(n.op for n in k.nodes) for k in part.partition(graph)] == [
        ["conv_general_dilated"], ["tanh", "transpose"]]


def test_the_measured_model_prices_a_library_fusion_as_one_kernel_only_under_the_option(
        tmp_path):
    fn, args = CASES["separable"]
    graph = capture.capture(fn, args).graph

    def convs_per_kernel(options):
        priced = cost.Measured(tmp_path, compiler_options=options, whole_below=0).cost(graph)
        assert not priced.whole and priced.total > 0
        return sorted(sum(n.op == "conv_general_dilated" for n in k.kernel.nodes)
                      for k in priced.kernels)

    assert convs_per_kernel(compile_options.YNN_ELTWISE)[-1] == 2
    assert convs_per_kernel(compile_options.NO_YNN)[-2:] == [1, 1]


def test_a_value_read_through_a_copy_ends_a_library_fusion():
    """NASNet-A's NCHW cell: `sep(y) + y` with `y` pooled too is added in the logical
    order (`layouts.memory_orders`), so the separable conv's result is copied into it:
    no fusion reaches the depthwise conv or the 1x1 conv (a conv and a dot of XLA's
    own), while `sep(sep(y)) + sep'(y)` is one call. Without the orders, the first add
    was predicted to take both convs in."""
    nchw = ("NCHW", "OIHW", "NCHW")

    def c(x, w, groups=1):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=nchw,
                                        feature_group_count=groups)

    def cell(x, dw, pw, w):
        y = jax.nn.relu(c(x, pw))
        sep = lambda v, k: c(c(v, dw * k, 32), pw * k)  # noqa: E731 (k: weights apart)
        pooled = lax.reduce_window(y, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 1, 1), "SAME")
        out = jnp.concatenate([sep(y, 1.0) + y, sep(sep(y, 2.0), 3.0) + sep(y, 4.0),
                               pooled + y], 1)
        return c(out, w)
    args = (ones((1, 32, 16, 16)), ones((32, 1, 3, 3)), ones((32, 32, 1, 1)),
            ones((32, 96, 1, 1)))
    graph = capture.capture(cell, args).graph
    text = compile_options.jit(emit.to_callable(graph), compile_options.YNN_ELTWISE) \
        .lower(*args).compile().as_text()
    orders = layouts.memory_orders(graph)
    groups = library.groups(graph, orders=orders)
    inside = {n for g in groups for n in g}
    predicted = (sorted(tuple(sum(n.op == op for n in g) for op in CONTRACTIONS)
                        for g in groups if any(n.op in CONTRACTIONS for n in g)),
                 sum(n.op in CONTRACTIONS and n not in inside for n in graph.nodes))
    assert predicted == _fused(text)
    assert predicted[1] >= 2 and _predicted(graph) != predicted
