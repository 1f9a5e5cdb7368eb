"""Comparison helpers shared by the tests."""
from __future__ import annotations

import jax
import numpy as np


def assert_same(got, want, what: str = "") -> None:
    """Same pytree structure, and every leaf equal bit for bit (NaNs equal)."""
    assert jax.tree.structure(got) == jax.tree.structure(want), what
    for i, (g, w) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(want))):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, \
            f"{what} leaf {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        floating = g.dtype.kind in "fc" or g.dtype.name == "bfloat16"
        assert np.array_equal(g, w, equal_nan=floating), f"{what} leaf {i} differs"


def float_argnums(args, static_argnums=()) -> tuple[int, ...]:
    """Positions of arguments whose leaves are all floating point (differentiable)."""
    def is_float(leaf):
        return np.issubdtype(np.asarray(leaf).dtype, np.floating) or \
            np.asarray(leaf).dtype.name == "bfloat16"
    return tuple(i for i, a in enumerate(args) if i not in static_argnums
                 and jax.tree.leaves(a) and all(map(is_float, jax.tree.leaves(a))))


def scalar_loss(fn, args, argnums):
    """A scalar of `fn`'s float outputs, as a function of the arguments at `argnums`."""
    def loss(*diff):
        full = list(args)
        for i, d in zip(argnums, diff):
            full[i] = d
        leaves = [l for l in jax.tree.leaves(fn(*full))
                  if np.issubdtype(l.dtype, np.floating) or l.dtype.name == "bfloat16"]
        return sum(jax.numpy.sum(jax.numpy.sin(l.astype(np.float32))) for l in leaves)
    return loss


def assert_close(got, want, rtol: float, what: str = "") -> None:
    """Same structure, shapes and dtypes; every leaf within `rtol` of the largest
    magnitude in `want` (the error measure the benchmarks report)."""
    assert jax.tree.structure(got) == jax.tree.structure(want), what
    for i, (g, w) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(want))):
        assert g.shape == w.shape and g.dtype == w.dtype, \
            f"{what} leaf {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert np.all(np.isfinite(g)) and np.all(np.isfinite(w)), f"{what} leaf {i}: not finite"
        scale = max(float(np.max(np.abs(w), initial=0.0)), 1e-30)
        err = float(np.max(np.abs(g - w), initial=0.0))
        assert err <= rtol * scale, f"{what} leaf {i}: error {err:.3g} > {rtol:g} x {scale:.3g}"


def run_kernels(graph, kernels, args) -> list:
    """`graph`'s outputs computed kernel by kernel, each isolated as a program of its own
    (`cost.partition.isolate`); values that cross in a conv's own order are handed over
    in it."""
    from hlo_opt import emit
    from hlo_opt.cost import layouts, partition

    env = dict(zip((n.out() for n in graph.inputs), args))
    for kernel in kernels:
        kept = dict(kernel.relaid)
        reads, outputs = partition.ports(kernel)
        ins = [env[v] if v not in kept else env[v].transpose(kept[v]) for v in reads]
        outs = emit.run(partition.isolate(kernel), ins)
        env.update((v, o if v not in kept else o.transpose(layouts.inverse(kept[v])))
                   for v, o in zip(outputs, outs))
        env.update((v, env[base].reshape(v.type.shape)) for v, base in kernel.views)
    return [env[v] for v in graph.outputs]
