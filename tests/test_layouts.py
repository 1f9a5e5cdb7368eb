"""Which values cross to and from convs in the convs' own memory order (`cost/layouts.py`),
and the isolated conv kernels that read and write them so."""
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlo_opt import capture, emit
from hlo_opt.cost import partition as part
from helpers import assert_close, run_kernels

NCHW = ("NCHW", "OIHW", "NCHW")
X = jnp.asarray(np.random.default_rng(0).standard_normal((1, 8, 12, 12)), jnp.float32)
W1 = jnp.asarray(np.random.default_rng(1).standard_normal((16, 8, 3, 3)), jnp.float32)
W2 = jnp.asarray(np.random.default_rng(2).standard_normal((8, 16, 1, 1)), jnp.float32)


def conv(x, w, spec=NCHW):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=spec)


def pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


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


def test_pooling_and_logical_order_readers_break_the_chain():
    assert conv_marks(lambda x, a, b: conv(pool(conv(x, a)), b), X, W1, W2) == [
        (False, False), (False, False)]
    # a reader that is no conv and no loop (here a dot) wants the logical order
    def fn(x, a, b):
        c = conv(x, a)
        return c + 1.0, jnp.sum(c @ b)
    assert conv_marks(fn, X, W1, jnp.ones((12, 3))) == [(False, False)]
    # ... and without the dot, the loop and the reduction take the conv's order
    assert conv_marks(lambda x, a: jnp.mean(jax.nn.relu(conv(x, a)), (2, 3)), X, W1) == [
        (False, True)]


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
    def copies(kernel):
        program = part.isolate(kernel)
        args = [jnp.zeros(n.types[0].shape, n.types[0].dtype) for n in program.inputs]
        hlo = jax.jit(emit.to_callable(program)).lower(*args).compile().as_text()
        entry = hlo[hlo.index("\nENTRY"):]
        return len(re.findall(r"%(?:transpose|copy)[\w.-]* = ", entry))

    fn = lambda x, a, b, c: conv(jax.nn.relu(conv(jax.nn.relu(conv(x, a)), b)), c)  # noqa
    g = capture.capture(fn, (X, W1, W2, W1[:, :8])).graph
    middle = [k for k in part.partition(g, conv_layouts=True) if k.kind == "contract"][1]
    plain = [k for k in part.partition(g) if k.kind == "contract"][1]
    assert len(middle.relaid) == 2 and not plain.relaid
    assert copies(middle) == 1 < copies(plain) == 3
