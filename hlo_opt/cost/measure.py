"""Timing a small program on this device: the measured half of the cost model.

A program (a kernel isolated by `partition.isolate`, or a whole graph) is emitted,
jitted once and run on random inputs of its shapes and dtypes: a warm-up call, then the
median of several samples, each long enough to read (`min_sample` seconds, many calls
if the program is short), every call blocked until ready. The cost of an empty call —
jax's dispatch, measured once per process — is subtracted, with a floor of `EPSILON`.
"""
from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from hlo_opt import emit
from hlo_opt.ir import Graph, TensorType

EPSILON = 1e-7


def random_args(types: Sequence[TensorType], seed: int = 0) -> list[jax.Array]:
    """Arrays of the given types: normal floats, small non-negative integers (valid as
    indices of any non-empty axis after XLA's clamping), random booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for t in types:
        dtype = np.dtype(t.dtype)
        if dtype.kind == "b":
            a = rng.random(t.shape) < 0.5
        elif dtype.kind in "iu":
            a = rng.integers(0, 4, t.shape)
        elif dtype.kind == "c":
            a = rng.standard_normal(t.shape) + 1j * rng.standard_normal(t.shape)
        else:
            a = rng.standard_normal(t.shape, np.float32)
        out.append(jnp.asarray(a, dtype))
    return out


def _per_call(fn: Callable, args, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / number


def time_callable(fn: Callable, args, *, repeats: int = 5, min_sample: float = 2e-3) -> float:
    """Median seconds per call of `fn(*args)` (already compiled or not)."""
    jax.block_until_ready(fn(*args))                 # compile and warm up
    once = _per_call(fn, args, 1)
    number = max(1, int(min_sample / max(once, 1e-9)))
    return statistics.median(_per_call(fn, args, number) for _ in range(repeats))


@functools.cache
def dispatch_overhead() -> float:
    """Seconds of an (almost) empty jitted call: dispatch and launch, no work."""
    tiny = jax.jit(lambda x: x + 1)
    x = jnp.zeros((), jnp.float32)
    return min(time_callable(tiny, (x,), repeats=7) for _ in range(3))


def time_graph(graph: Graph, *, repeats: int = 5, min_sample: float = 2e-3,
               seed: int = 0) -> float:
    """Seconds one run of `graph` takes on this device, dispatch overhead excluded."""
    fn = jax.jit(emit.to_callable(graph))
    args = random_args([n.types[0] for n in graph.inputs], seed)
    seconds = time_callable(fn, args, repeats=repeats, min_sample=min_sample)
    return max(seconds - dispatch_overhead(), EPSILON)
