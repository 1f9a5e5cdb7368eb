"""Which values cross to and from convs in the convs' own memory order (`cost/layouts.py`),
and the isolated conv kernels that read and write them so."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from hlo_opt import capture, emit
from hlo_opt.cost import layouts, partition as part
from helpers import assert_close, run_kernels

NCHW = ("NCHW", "OIHW", "NCHW")
X = jnp.asarray(np.random.default_rng(0).standard_normal((1, 8, 12, 12)), jnp.float32)
W1 = jnp.asarray(np.random.default_rng(1).standard_normal((16, 8, 3, 3)), jnp.float32)
W2 = jnp.asarray(np.random.default_rng(2).standard_normal((8, 16, 1, 1)), jnp.float32)


def conv(x, w, spec=NCHW):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=spec)


def pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _entry(program) -> str:
    """The entry computation of `program`, compiled, on zeros of its inputs' types."""
    args = [jnp.zeros(n.types[0].shape, n.types[0].dtype) for n in program.inputs]
    hlo = jax.jit(emit.to_callable(program)).lower(*args).compile().as_text()
    return hlo[hlo.index("\nENTRY"):]


def copies(kernel) -> int:
    """Transposes and copies left in the kernel's isolated program, compiled."""
    return len(re.findall(r"%(?:transpose|copy)[\w.-]* = ", _entry(part.isolate(kernel))))


def relayouts(program) -> list[str]:
    """The transposes, copies and fusions named after them in `program`, compiled."""
    return re.findall(r"%[\w.-]*(?:transpose|copy)[\w.-]* = ", _entry(program))


def conv_marks(fn, *args):
    """(activation relaid, result relaid) of each conv kernel, in order."""
    g = capture.capture(fn, args).graph
    kernels = part.partition(g, conv_layouts=True)
    out = []
    for k in kernels:
        (node,) = [n for n in k.nodes if n.op == "conv_general_dilated"] or [None]
        if node is not None:
            kept = dict(k.relaid)
            out.append((node.inputs[0] in kept, node.out() in kept))
    return out


def test_a_conv_relu_conv_chain_keeps_the_conv_layout_between_them():
    # The program's input and output are in the logical order; in between, XLA keeps
    # the convs' channels-last order through the relu.
    marks = conv_marks(lambda x, a, b: conv(jax.nn.relu(conv(x, a)), b), X, W1, W2)
    assert marks == [(False, True), (True, False)]


def test_a_conv_result_stays_in_its_order_and_logical_order_readers_pay_the_copy():
    # pooling keeps the logical order: the conv before it writes its own, the pool reads
    # that (the copy is in the pool's kernel), and the conv after it reads the logical
    fn = lambda x, a, b: conv(pool(conv(x, a)), b)  # noqa: E731
    assert conv_marks(fn, X, W1, W2) == [(False, True), (False, False)]
    g = capture.capture(fn, (X, W1, W2)).graph
    (pooling,) = [k for k in part.partition(g, conv_layouts=True) if k.kind == "reduce"]
    assert [v.node.op for v, _ in pooling.relaid] == ["conv_general_dilated"]
    # a dot reads the conv's result relaid; the program's result is written logical
    def fn(x, a, b):
        c = conv(x, a)
        return c + 1.0, jnp.sum(c @ b)
    g = capture.capture(fn, (X, W1, jnp.ones((12, 3)))).graph
    orders = layouts.memory_orders(g)
    assert list(orders) == [g.outputs[0].node.inputs[0]]   # the conv's result alone
    # a reduction takes the order it is given
    assert conv_marks(lambda x, a: jnp.mean(jax.nn.relu(conv(x, a)), (2, 3)), X, W1) == [
        (False, True)]


def test_transposes_between_a_layout_and_its_inverse_move_no_data():
    # NHWC convs with NCHW elementwise work between them, as a residual: the NCHW values
    # are laid out channels-last and the transposes are bitcasts, so the second loop,
    # handed the residual `y` so, has no copy left in it, timed alone
    nhwc = ("NHWC", "HWIO", "NHWC")
    x, a, c = X.transpose(0, 2, 3, 1), W1.transpose(2, 3, 1, 0), W2.transpose(2, 3, 1, 0)
    b = jnp.ones((1, 1, 16, 16), jnp.float32) / 16
    nchw, back = (0, 3, 1, 2), (0, 2, 3, 1)

    def fn(x, a, b, c):
        y = jnp.tanh(conv(x, a, nhwc).transpose(nchw))
        z = conv(y.transpose(back), b, nhwc).transpose(nchw)
        return conv(jnp.tanh(z + y).transpose(back), c, nhwc)
    g = capture.capture(fn, (x, a, b, c)).graph
    y = next(n for n in g.nodes if n.op == "tanh").out()
    assert layouts.memory_orders(g)[y] == (0, 2, 3, 1)
    second = [k for k in part.partition(g, conv_layouts=True) if k.kind == "loop"][1]
    assert dict(second.relaid) == {y: (0, 2, 3, 1)}
    plain = [k for k in part.partition(g) if k.kind == "loop"][1]
    assert copies(second) == 0 < copies(plain)
    assert_close(run_kernels(g, part.partition(g, conv_layouts=True), (x, a, b, c)),
                 [jax.jit(fn)(x, a, b, c)], 1e-5, "bitcast transposes")


def test_a_weight_transposed_for_a_dot_is_handed_over_logical():
    # what a dot or a pool reads is wanted in the logical order: a transposed weight is
    # a parameter of the per-call program once frozen, not a view of the original
    g = capture.capture(lambda x, w: x @ w.T, (jnp.ones((4, 8)), jnp.ones((16, 8)))).graph
    assert layouts.memory_orders(g) == {}


def test_a_channels_last_conv_needs_no_relayout():
    nhwc = ("NHWC", "HWIO", "NHWC")
    x, a, b = X.transpose(0, 2, 3, 1), W1.transpose(2, 3, 1, 0), W2.transpose(2, 3, 1, 0)
    marks = conv_marks(lambda x, a, b: conv(jax.nn.relu(conv(x, a, nhwc)), b, nhwc), x, a, b)
    assert marks == [(False, False), (False, False)]


def test_relaid_kernels_compose_to_the_whole_program():
    fn = lambda x, a, b: jnp.tanh(conv(jax.nn.relu(conv(x, a)) * 0.5, b))  # noqa: E731
    g = capture.capture(fn, (X, W1, W2)).graph
    kernels = part.partition(g, conv_layouts=True)
    assert any(k.relaid for k in kernels)
    assert_close(run_kernels(g, kernels, (X, W1, W2)), [jax.jit(fn)(X, W1, W2)], 1e-5,
                 "relaid")


def test_xla_folds_the_isolated_relayout_into_the_conv():
    # The isolated NCHW conv between two relaid values compiles to the weight's copy and
    # the conv alone; timed with logical-order operands it gets a copy on each side.
    fn = lambda x, a, b, c: conv(jax.nn.relu(conv(jax.nn.relu(conv(x, a)), b)), c)  # noqa
    g = capture.capture(fn, (X, W1, W2, W1[:, :8])).graph
    middle = [k for k in part.partition(g, conv_layouts=True) if k.kind == "contract"][1]
    plain = [k for k in part.partition(g) if k.kind == "contract"][1]
    assert len(middle.relaid) == 2 and not plain.relaid
    assert copies(middle) == 1 < copies(plain) == 3


def _avg(x):
    return lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 1, 1), "SAME")


def _cell(y_pooled: bool, second_conv: bool, from_input: bool = False):
    """One add after an NCHW conv, of the conv's input `y` (or of a second conv's
    result); `y` pooled besides, or not; `y` the program's input, or a conv's relu."""
    def fn(x, a, b, c):
        y = x if from_input else jax.nn.relu(conv(x, a))
        s = conv(y, b) + (conv(y, c) if second_conv else y)
        out = conv(s, c)
        return (out, _avg(y)) if y_pooled else out
    return fn


ADDS = {   # name: (program, what XLA makes of the add)
    "pooled_input_of_the_conv": (_cell(True, False), "logical"),
    "unpooled_input_of_the_conv": (_cell(False, False), "conv"),
    "two_convs_of_a_pooled_value": (_cell(True, True), "conv"),
    "a_parameter": (_cell(False, False, from_input=True), "logical"),
    "a_pool": (lambda x, a, b, c: conv(conv(jax.nn.relu(conv(x, a)), b) +
                                      _avg(jax.nn.relu(conv(x, a))), c), "logical"),
}


@pytest.mark.parametrize("name", sorted(ADDS))
def test_an_add_after_a_conv_is_laid_out_as_xla_lays_it_out(name):
    # XLA CPU (layout assignment, then layout normalisation) makes the add on a
    # channels-last [1, 12, 12, 8] array, or on the logical [1, 8, 12, 12] one.
    fn, expected = ADDS[name]
    x = jnp.ones((1, 8, 12, 12))
    a, b, c = (jnp.ones((8, 8, 1, 1)) * k for k in (1, 2, 3))
    text = jax.jit(fn).lower(x, a, b, c).compile().as_text()
    shapes = set(re.findall(r"= f32\[([\d,]+)\]\{[\d,]+\} add\(", text))
    xla = {"1,12,12,8": "conv", "1,8,12,12": "logical"}
    assert {xla[s] for s in shapes} == {expected}
    g = capture.capture(fn, (x, a, b, c)).graph
    (add,) = [n for n in g.nodes if n.op == "add"]
    orders = layouts.memory_orders(g)
    assert orders.get(add.out(), "logical") == {"conv": (0, 2, 3, 1), "logical": "logical"}[expected]


def test_a_weight_transposed_for_a_conv_is_made_in_the_conv_order():
    # OIHW -> HWIO for an NHWC conv: the transpose is the copy (computed once where the
    # weight is frozen); the conv reads it in its own order, with no copy of its own. A
    # bitcast of the OIHW weight would leave the conv's kernel a copy on every call.
    nhwc = ("NHWC", "HWIO", "NHWC")
    fn = lambda x, w: conv(x, w.transpose(2, 3, 1, 0), nhwc)  # noqa: E731
    g = capture.capture(fn, (X.transpose(0, 2, 3, 1), W1)).graph
    (t,) = [n for n in g.nodes if n.op == "transpose"]
    assert t.out() not in layouts.memory_orders(g)
    (k,) = [k for k in part.partition(g, conv_layouts=True) if k.kind == "contract"]
    assert not k.relaid


def _fire(after):
    """Two NCHW convs of one squeezed value, concatenated (a SqueezeNet fire module),
    then `after(concat, w)`."""
    def fn(x, a, b, w):
        s = jax.nn.relu(conv(x, b))
        both = [jax.nn.relu(conv(s, a)), jax.nn.relu(conv(s, b))]
        return after(jnp.concatenate(both, 1), w)
    return fn


def _nhwc_conv(c, w):
    nhwc = ("NHWC", "HWIO", "NHWC")
    return conv(c.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), nhwc).transpose(0, 3, 1, 2)


CONCATS = {   # name: (program, the order XLA writes the concatenate in)
    "read_by_one_conv": (_fire(conv), "conv"),
    "read_by_a_conv_through_its_transpose": (_fire(_nhwc_conv), "conv"),
    "of_pools_read_by_one_conv": (
        lambda x, a, b, w: conv(jnp.concatenate([pool(conv(x, a)), pool(conv(x, b))], 1), w),
        "conv"),
    "read_by_a_conv_and_a_pool": (_fire(lambda c, w: (conv(c, w), pool(c))), "logical"),
    "read_by_two_convs": (_fire(lambda c, w: conv(c, w) + conv(c, w * 2)), "logical"),
    "read_by_a_conv_and_the_result": (_fire(lambda c, w: (conv(c, w), c)), "logical"),
    "read_by_one_conv_through_a_relu": (_fire(lambda c, w: conv(jax.nn.relu(c), w)), "conv"),
    "read_by_a_conv_and_the_result_through_a_relu": (
        _fire(lambda c, w: (conv(jax.nn.relu(c), w), jax.nn.relu(c))), "logical"),
    "read_by_one_conv_through_a_scaled_relu": (
        _fire(lambda c, w: conv(jax.nn.relu(c) * 0.5, w)), "conv"),
}


@pytest.mark.parametrize("name", sorted(CONCATS))
def test_a_concatenate_is_written_in_the_order_of_its_one_conv(name):
    # XLA CPU fuses the concatenate with the copy into its one conv's channels-last
    # order ([1, 12, 12, 16]); read by more, it makes it logical ([1, 16, 12, 12]), and
    # copies it for the conv. Priced logical, the concatenate and the conv each paid a
    # transposing copy that the program does not make (SqueezeNet's fire modules).
    fn, expected = CONCATS[name]
    x = jnp.ones((1, 8, 12, 12))
    a, b, w = jnp.ones((8, 8, 3, 3)), jnp.ones((8, 8, 1, 1)) * 2, jnp.ones((8, 16, 1, 1))
    text = jax.jit(fn).lower(x, a, b, w).compile().as_text()
    fused = {m[0]: m[1] for m in re.findall(r"^(?:ENTRY )?%?([\w.\-]+) .*?\{\n(.*?)\n\}",
                                            text, re.M | re.S)}
    made = {shape for shape, called in re.findall(
        r"= f32\[([\d,]+)\]\{[\d,]+\} fusion\(.*calls=%([\w.\-]+)", text)
        if "concatenate(" in fused.get(called, "")}
    assert {"conv" if s.endswith(",16") else "logical" for s in made} == {expected}
    g = capture.capture(fn, (x, a, b, w)).graph
    (concat,) = [n for n in g.nodes if n.op == "concatenate"]
    assert layouts.memory_orders(g).get(concat.out(), "logical") == {
        "conv": (0, 2, 3, 1), "logical": "logical"}[expected]


def test_the_conv_after_a_fire_module_reads_its_concatenate_with_no_copy():
    # timed alone, the conv is handed the concatenate channels-last, as the program
    # hands it: its weight's copy is the one left (handed it logical, a copy of its
    # input too)
    fn = _fire(lambda c, w: jax.nn.relu(conv(c, w)))
    x = jnp.ones((1, 8, 12, 12))
    a, b, w = jnp.ones((8, 8, 3, 3)), jnp.ones((8, 8, 1, 1)), jnp.ones((8, 16, 1, 1))
    g = capture.capture(fn, (x, a, b, w)).graph
    kernels = part.partition(g, conv_layouts=True)
    last = [k for k in kernels if k.kind == "contract"][-1]
    assert copies(last) == 1
    assert_close(run_kernels(g, kernels, (x, a, b, w)), [jax.jit(fn)(x, a, b, w)], 1e-5,
                 "fire")


def _split_groups(x, a, b, c):
    """A conv's relu split in two on its channels, each half convolved, concatenated:
    ResNeXt-50's grouped conv split in two (`variants.split_conv`)."""
    y = jax.nn.relu(conv(x, a))
    halves = [conv(y[:, i * 8:(i + 1) * 8], b) for i in range(2)]
    return conv(jax.nn.relu(jnp.concatenate(halves, axis=1)), c)


SPLIT_ARGS = (X, W1, W2[:, :8], jnp.concatenate([W2[:, :8]] * 2, axis=1))


def _isolated_channels_last(kernel) -> None:
    """`kernel` isolated reads the conv's channels-last result as it is and compiles to
    no transpose or copy."""
    program = part.isolate(kernel)
    assert not any(n.op == "transpose" for n in program.nodes)
    assert [n.types[0].shape for n in program.inputs] == [(1, 12, 12, 16)]
    assert not relayouts(program)


def test_a_relaid_loop_with_slices_is_isolated_in_its_memory_order():
    # Built between transposes, XLA wrote each slice transposed and copied it; on the
    # channels-last axes it is one loop, no transpose, no copy.
    args = SPLIT_ARGS
    g = capture.capture(_split_groups, args).graph
    kernels = part.partition(g, conv_layouts=True)
    (sliced,) = [k for k in kernels if any(n.op == "slice" for n in k.nodes)]
    assert sliced.relaid and {n.op for n in sliced.nodes} == {"relu", "slice"}
    _isolated_channels_last(sliced)
    assert_close(run_kernels(g, kernels, args), [jax.jit(_split_groups)(*args)], 1e-5,
                 "split groups")


def test_the_concatenate_and_relu_of_split_groups_are_isolated_channels_last():
    # XLA fuses the concatenate, the relu and the copy into the 1x1 conv's order into
    # one loop that reads both halves and writes channels-last; the kernel is handed and
    # hands on that order, and the conv after it reads it with no copy of its input.
    args = SPLIT_ARGS
    g = capture.capture(_split_groups, args).graph
    kernels = part.partition(g, conv_layouts=True)
    (joined,) = [k for k in kernels if any(n.op == "concatenate" for n in k.nodes)]
    assert {n.op for n in joined.nodes} == {"concatenate", "relu"}
    (out,) = joined.outputs
    assert dict(joined.relaid)[out] == (0, 2, 3, 1)
    program = part.isolate(joined)
    assert not any(n.op == "transpose" for n in program.nodes)
    (last,) = [k for k in kernels if out in k.inputs]
    assert dict(last.relaid)[out] == (0, 2, 3, 1)
    assert copies(last) == 2       # its weight's and the program's result's, not its input's
    assert_close(run_kernels(g, kernels, args), [jax.jit(_split_groups)(*args)], 1e-5,
                 "split groups")


def _split_groups_nhwc(x, a, b, c):
    """`_split_groups` with each conv made channels-last between transposes, as the
    layout rule makes a network's convs (`variants`: split groups, then nhwc)."""
    y = jax.nn.relu(_nhwc_conv(x, a))
    halves = [_nhwc_conv(y[:, i * 8:(i + 1) * 8], b) for i in range(2)]
    return _nhwc_conv(jax.nn.relu(jnp.concatenate(halves, axis=1)), c)


def test_a_slice_between_channels_last_convs_is_isolated_with_no_transpose():
    # relu, slice and the transposes to and from the NHWC convs are one loop; in the
    # program the transposes are bitcasts, so timed alone it slices the conv's result
    # on its last axis, as the program does, not in a {2,1,3,0} layout and copied
    args = SPLIT_ARGS
    g = capture.capture(_split_groups_nhwc, args).graph
    kernels = part.partition(g, conv_layouts=True)
    sliced = [k for k in kernels if any(n.op == "slice" for n in k.nodes)]
    assert sliced and all("transpose" in {n.op for n in k.nodes} for k in sliced)
    for k in sliced:
        _isolated_channels_last(k)
    assert_close(run_kernels(g, kernels, args), [jax.jit(_split_groups_nhwc)(*args)], 1e-5,
                 "split groups, channels-last")
