"""verify's comparison where the original's own matmuls are reduced-precision (TF32 on a
GPU): a rewrite as accurate as the original passes, a wrong one still fails.

The CPU computes float32 dots in full, so the reduced default is played by a program that
cuts its dot's inputs to bfloat16's bits unless the default matmul precision is "highest",
as the GPU does to TF32: the same program, traced under either setting. The bits are cut
by masking, which no compiler may drop (XLA on a GPU drops a float32-bfloat16-float32
round trip: its excess precision is allowed)."""
import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from hlo_opt import check


def _rounded(a):
    if jax.default_matmul_precision.value == "highest":
        return a
    bits = lax.bitcast_convert_type(a, jnp.uint32) & jnp.uint32(0xFFFF0000)
    return lax.bitcast_convert_type(bits, jnp.float32)


@jax.jit
def original(x, w):
    return (_rounded(x) @ _rounded(w),)


@jax.jit
def rounded_otherwise(x, w):       # a sound rewrite whose reduced precision errs elsewhere,
    return (_rounded(3 * x) @ _rounded(w) / 3,)     # as another conv algorithm would


@jax.jit
def off_by_ten_percent(x, w):      # a wrong rewrite, over the noise of the cut bits
    return (_rounded(x) @ _rounded(w) * 1.1,)


def _args(seed):
    kx, kw = jax.random.split(jax.random.key(seed))
    return [jax.random.normal(kx, (32, 256)), jax.random.normal(kw, (256, 128))]


def test_a_reduced_precision_original_is_beyond_the_plain_tolerance():
    args = _args(0)
    want = jax.device_get(original(*args))
    exact = check.full_precision(original, *args)
    # the stand-in does what TF32 does: the original is off by more than float32's 1e-4
    assert check.difference(want, exact) is not None


def test_a_rewrite_as_accurate_as_the_original_passes():
    args = _args(1)
    want, got = jax.device_get(original(*args)), jax.device_get(rounded_otherwise(*args))
    assert check.difference(want, got) is not None     # beyond float32's tolerance
    exact = check.full_precision(original, *args)
    assert check.difference(want, got, exact) is None
    assert check.compare(original, rounded_otherwise, [_args(2), _args(3)]) is None


def test_a_wrong_rewrite_fails_though_the_original_is_inexact():
    why = check.compare(original, off_by_ten_percent, [_args(4)])
    assert why is not None and "differs by" in why


def test_on_full_precision_the_plain_tolerance_decides():
    args = _args(5)
    with jax.default_matmul_precision("highest"):
        want = jax.device_get(original(*args))
        close = [want[0] * (1 + 5e-5)]
        far = [want[0] * (1 + 5e-3)]
    assert check.difference(want, close, want) is None
    # the original is exact here, so nothing widens the tolerance
    assert check.difference(want, far, want) is not None
    assert np.isfinite(want[0]).all()


def _nested(x, w, k, n):
    y = jax.jit(lambda a, b: a @ b)(x, w)                      # a dot in a nested call
    z = lax.cond(x[0, 0] > 0, lambda v: lax.conv(v, k, (1, 1), "SAME"),
                 lambda v: v, y.reshape(1, 1, 32, 128))         # a conv in a branch
    return z, n @ n                                             # an integer dot


def _nested_args():
    kx, kw, kk = jax.random.split(jax.random.key(6), 3)
    return (jax.random.normal(kx, (32, 256)), jax.random.normal(kw, (256, 128)),
            jax.random.normal(kk, (1, 1, 3, 3)), jnp.ones((4, 4), jnp.int32))


def _highest_in(fn, args) -> int:
    return jax.jit(fn).lower(*args).as_text().count("HIGHEST")


def test_a_captured_jaxpr_runs_at_full_precision_only_once_its_dots_say_so():
    args = _nested_args()
    closed = jax.make_jaxpr(_nested)(*args)
    replayed = jax.extend.core.jaxpr_as_fun(closed)
    # the precision was fixed when traced: the setting does not reach a replayed jaxpr
    with jax.default_matmul_precision("highest"):
        assert _highest_in(replayed, args) == 0
    exact = jax.extend.core.jaxpr_as_fun(check.at_full_precision(closed))
    # both operands of the nested dot and of the branch's conv; the integer dot untouched
    assert _highest_in(exact, args) == 4
    for a, b in zip(jax.jit(exact)(*args), _nested(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_bare_array_outputs_compare_as_one_leaf_not_as_rows():
    # a model returning one array, not a tuple: its full-precision run is one leaf too
    bare, bare_otherwise = (jax.jit(lambda x, w, f=f: f(x, w)[0])
                            for f in (original, rounded_otherwise))
    args = _args(7)
    want, got = bare(*args), bare_otherwise(*args)
    assert want.shape == (32, 128) and check.difference([want], [got]) is not None
    assert check.compare(bare, bare_otherwise, [args]) is None
    assert check.differs(bare, args, [want], [got]) is None
