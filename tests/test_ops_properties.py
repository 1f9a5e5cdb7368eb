"""Property tests for the references with the most arithmetic in them (padding,
windows, convolution): random configurations, NumPy reference vs the JAX emitter."""
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from hlo_opt import capture, emit

SETTINGS = settings(max_examples=30, deadline=None)


def _check(fn, *args):
    graph = capture.capture(fn, args).graph
    want = np.asarray(fn(*args))
    (got,) = emit.reference(graph, [np.asarray(a) for a in args])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(st.lists(st.tuples(st.integers(-2, 3), st.integers(-2, 3), st.integers(0, 2)),
                min_size=2, max_size=2))
def test_pad(config):
    x = jnp.arange(1.0, 13.0).reshape(3, 4)
    sizes = [n + (n - 1) * i + lo + hi for n, (lo, hi, i) in zip(x.shape, config)]
    if min(sizes) < 0:
        return
    _check(lambda t: lax.pad(t, -1.5, config), x)


@SETTINGS
@given(window=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       strides=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       padding=st.sampled_from(["SAME", "VALID"]), kind=st.sampled_from(["sum", "max"]))
def test_reduce_window(window, strides, dilation, padding, kind):
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 7, 6)), jnp.float32)
    init, op = (0.0, lax.add) if kind == "sum" else (-jnp.inf, lax.max)
    _check(lambda t: lax.reduce_window(t, init, op, (1,) + window, (1,) + strides, padding,
                                       window_dilation=(1,) + dilation), x)


@SETTINGS
@given(groups=st.sampled_from([1, 2, 4]), stride=st.integers(1, 2), dilation=st.integers(1, 2),
       lhs_dilation=st.integers(1, 2), kernel=st.integers(1, 3),
       layout=st.sampled_from([("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"),
                               ("NCHW", "HWIO", "NHWC")]))
def test_conv(groups, stride, dilation, lhs_dilation, kernel, layout):
    rng = np.random.default_rng(1)
    lhs_shape = {"NCHW": (2, 4, 7, 6), "NHWC": (2, 7, 6, 4)}[layout[0]]
    rhs_shape = {"OIHW": (8, 4 // groups, kernel, kernel),
                 "HWIO": (kernel, kernel, 4 // groups, 8)}[layout[1]]
    x = jnp.asarray(rng.standard_normal(lhs_shape), jnp.float32)
    w = jnp.asarray(rng.standard_normal(rhs_shape), jnp.float32)
    _check(lambda a, b: lax.conv_general_dilated(
        a, b, (stride, stride), ((1, 0), (0, 1)), lhs_dilation=(lhs_dilation,) * 2,
        rhs_dilation=(dilation,) * 2, dimension_numbers=layout, feature_group_count=groups), x, w)
