"""The model zoo: every model builds (both layouts for CNNs, f32 and bf16), hlo_opt.jit
agrees with jax.jit on it, and the NCHW and NHWC variants compute the same function."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bench
import hlo_opt
import models
from helpers import assert_close
from models import layers

CNN_NAMES = [n for n in models.NAMES if n in models.CNNS]
CONFIGS = [(n, lay) for n in models.NAMES
           for lay in (("NCHW", "NHWC") if n in models.CNNS else (None,))]
OUT_SHAPES = {"nasrnn": (2, 32), "bert": (2, 8, 32), "sru": (2, 2)}
# The rewrites themselves under test: no verify or measure_final to fall back on, so a
# wrong rewrite shows as a wrong answer. The analytic cost keeps the search deterministic.
REWRITTEN = dict(cost="analytic", time_limit=3.0, verify=False, measure_final=False)


def _build(name, layout=None, **config):
    return models.build(name, layout=layout, small=True, **config)


@pytest.mark.parametrize("name,layout", CONFIGS)
def test_builds_and_hlo_opt_matches_jax_jit(name, layout):
    fn, params, inputs = _build(name, layout, batch=2)
    want = jax.jit(fn)(params, *inputs)
    assert want.shape == OUT_SHAPES.get(name, (2, 10)) and want.dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(want))) and np.std(np.asarray(want)) > 0
    ours = hlo_opt.jit(fn, frozen_argnums=(0,), **REWRITTEN)
    assert_close(ours(params, *inputs), want, bench.tolerance("float32"), name)
    report = ours.explain(params, *inputs)
    assert not report.fell_back and report.cost_after <= report.cost_before
    REWRITES[(name, layout)] = sum(report.applied.values())


REWRITES = {}


def test_the_zoo_was_really_rewritten():
    """Runs after the test above: most zoo models had rewrites applied."""
    assert len(REWRITES) == len(CONFIGS)
    assert sum(count > 0 for count in REWRITES.values()) >= len(CONFIGS) // 2, REWRITES


@pytest.mark.parametrize("name", models.NAMES)
def test_bfloat16_builds_and_matches(name):
    fn, params, inputs = _build(name)
    fn16, params16, inputs16 = _build(name, dtype="bfloat16")
    floats = [a for a in jax.tree.leaves((params16, inputs16)) if a.dtype != jnp.int32]
    assert floats and all(a.dtype == jnp.bfloat16 for a in floats)
    want = jax.jit(fn16)(params16, *inputs16)
    assert want.dtype == jnp.bfloat16
    assert_close(hlo_opt.jit(fn16, frozen_argnums=(0,), **REWRITTEN)(params16, *inputs16), want,
                 bench.tolerance("bfloat16"), name)
    # Same seed, same numbers: bf16 tracks the f32 model loosely (rounding compounds).
    f32 = np.asarray(jax.jit(fn)(params, *inputs))
    assert np.corrcoef(np.asarray(want, np.float32).ravel(), f32.ravel())[0, 1] > 0.9


@pytest.mark.parametrize("name", CNN_NAMES)
def test_nchw_and_nhwc_agree_given_the_same_weights(name):
    fn_nchw, params, inputs = _build(name, "NCHW")
    fn_nhwc, params_nhwc, inputs_nhwc = _build(name, "NHWC")
    converted, images = layers.to_layout(params, inputs, "NCHW", "NHWC")
    # The NHWC build holds exactly the NCHW build's weights, transposed.
    jax.tree.map(np.testing.assert_array_equal, (converted, images), (params_nhwc, inputs_nhwc))
    assert any(a.ndim == 4 and a.shape != b.shape for a, b in
               zip(jax.tree.leaves(params), jax.tree.leaves(converted)))
    assert_close(jax.jit(fn_nhwc)(converted, *images), jax.jit(fn_nchw)(params, *inputs),
                 bench.tolerance("float32"), name)
    back = layers.to_layout(converted, images, "NHWC", "NCHW")
    jax.tree.map(np.testing.assert_array_equal, back, (params, inputs))


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_training_step_matches_jax_jit(name):
    fn, params, inputs = _build(name)
    step = bench.train_step(fn)
    want = jax.jit(step)(params, *inputs)
    assert float(want[0]) > 0 and any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(want[1]))
    assert_close(hlo_opt.jit(step, **REWRITTEN)(params, *inputs), want, bench.tolerance("float32"),
                 name)


def test_seed_changes_weights_and_same_seed_repeats():
    _, a, _ = _build("squeezenet", seed=1)
    _, b, _ = _build("squeezenet", seed=1)
    _, c, _ = _build("squeezenet", seed=2)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert not np.array_equal(np.asarray(a[0]), np.asarray(c[0]))


def test_bad_configs_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="unknown model 'resnet18'"):
        models.build("resnet18")
    with pytest.raises(ValueError, match="bert is not a CNN"):
        models.build("bert", layout="NHWC", small=True)
    with pytest.raises(ValueError, match="layout must be one of"):
        models.build("resnet50", layout="NCWH", small=True)
