"""Do two programs give the same results? The check behind `verify=True`.

Outputs are compared leaf by leaf: integers and booleans exactly; floating point by the
largest error relative to the largest magnitude of the reference, within a tolerance
scaled to the dtype (rewrites reassociate sums: a merged dot adds in another order).

Where the backend computes float32 dots and convs in reduced precision by default (TF32
on recent NVIDIA GPUs, bfloat16 passes on TPU), the original itself is off by more than
that tolerance, and so is any rewrite. There, an output outside the tolerance is still
accepted when it lies as close (within `SLACK` times) to a full-precision run of the
original as the original's own output does. On a CPU the two runs are the same program,
and the check is the tolerance alone.

A jaxpr holds each dot's precision as it was when traced (None: the backend's default),
so running a captured jaxpr again under `jax.default_matmul_precision("highest")` runs
the same reduced-precision program; `at_full_precision` writes the precision into its
dots and convs instead.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.extend.core as jcore
import numpy as np
from jax import lax

TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-3, "bfloat16": 3e-2,
             "complex128": 1e-9, "complex64": 1e-4}
SLACK = 4.0     # two reduced-precision programs adding in other orders err alike, not 4x
MATMULS = ("dot_general", "conv_general_dilated")
HIGHEST = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)


def tolerance(dtype) -> float:
    """Largest relative error accepted for outputs of `dtype` (0 for exact types)."""
    return TOLERANCE.get(np.dtype(dtype).name, 0.0)


def agreement(reference, output) -> tuple[float, float]:
    """(max abs error, max abs error / max |reference|) over all output leaves."""
    ref = [np.asarray(a, np.float64) for a in jax.tree.leaves(reference)]
    out = [np.asarray(a, np.float64) for a in jax.tree.leaves(output)]
    if len(ref) != len(out) or any(a.shape != b.shape for a, b in zip(ref, out)):
        raise AssertionError("the outputs differ in structure or shape")
    err = max((float(np.max(np.abs(a - b))) for a, b in zip(ref, out) if a.size), default=0.0)
    scale = max((float(np.max(np.abs(a))) for a in ref if a.size), default=0.0)
    return err, err / scale if scale else err


def difference(want: Sequence, got: Sequence, exact: Sequence | None = None) -> str | None:
    """Why `got` is not `want` (lists of arrays), or None when they agree. With `exact`
    (the original at full precision), an output beyond the tolerance still agrees when
    it errs from `exact` by at most `SLACK` times what `want` does."""
    if len(want) != len(got):
        return f"{len(got)} outputs instead of {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape or w.dtype != g.dtype:
            return f"output {i} is {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
        tol = tolerance(w.dtype)
        if tol == 0.0:
            if not np.array_equal(w, g):
                return f"output {i} differs in {int(np.sum(w != g))} of {w.size} elements"
            continue
        wide = np.complex128 if w.dtype.kind == "c" else np.float64
        w64, g64 = w.astype(wide), g.astype(wide)
        if not np.array_equal(np.isnan(w64), np.isnan(g64)):
            return f"output {i} has NaNs where the original has none, or the reverse"
        finite = ~np.isnan(w64) & (w64 != g64)       # equal infinities agree
        if not finite.any():
            continue
        err = float(np.max(np.abs(w64[finite] - g64[finite]), initial=0.0))
        scale = max(float(np.max(np.abs(w64[finite]))), 1e-30)
        if err <= tol * scale:
            continue
        if exact is not None:
            real = ~np.isnan(w64)
            e64 = np.asarray(exact[i]).astype(wide)[real]
            own = float(np.max(np.abs(w64[real] - e64)))
            off = float(np.max(np.abs(g64[real] - e64)))
            if off <= SLACK * own + tol * scale:
                continue
            return (f"output {i} differs by {err:.3g} (relative {err / scale:.3g}, "
                    f"tolerance {tol:g} for {w.dtype}); from the original at full "
                    f"precision it is {off / scale:.3g} off, the original {own / scale:.3g}")
        return (f"output {i} differs by {err:.3g} (relative {err / scale:.3g}, "
                f"tolerance {tol:g} for {w.dtype})")
    return None


def full_precision(fn: Callable, *args):
    """`fn(*args)` on the host, its float32 dots and convs at full precision (`fn` a
    jitted Python function, traced again under the setting; for a captured jaxpr, run
    `at_full_precision` of it)."""
    with jax.default_matmul_precision("highest"):
        return jax.device_get(fn(*args))


def at_full_precision(closed: jcore.ClosedJaxpr) -> jcore.ClosedJaxpr:
    """`closed` with every inexact dot and conv, nested jaxprs' included, at HIGHEST."""
    return closed.replace(jaxpr=_highest(closed.jaxpr))


def _highest(jaxpr: jcore.Jaxpr) -> jcore.Jaxpr:
    return jaxpr.replace(eqns=[_highest_eqn(eqn) for eqn in jaxpr.eqns])


def _highest_eqn(eqn: jcore.JaxprEqn) -> jcore.JaxprEqn:
    params = {k: _highest_param(v) for k, v in eqn.params.items()}
    if eqn.primitive.name in MATMULS and np.issubdtype(eqn.invars[0].aval.dtype, np.inexact):
        params["precision"] = HIGHEST
    return eqn.replace(params=params)


def _highest_param(value):
    if isinstance(value, jcore.ClosedJaxpr):
        return at_full_precision(value)
    if isinstance(value, jcore.Jaxpr):
        return _highest(value)
    if type(value) is tuple:       # cond's branches; not a named tuple (conv's dimensions)
        return tuple(_highest_param(v) for v in value)
    return value


def differs(original: Callable, args: Sequence, want: Sequence, got: Sequence,
            exact: Callable | None = None) -> str | None:
    """Why `got` is not `want` (`original(*args)`), or None: within the tolerance, or, the
    original being inexact itself (reduced-precision matmuls), as near a full-precision
    run of it (`exact(*args)`, else `original` traced again at full precision) as `want`.
    Outputs compare leaf by leaf: a bare array is one leaf, not a list of rows."""
    want, got = jax.tree.leaves(want), jax.tree.leaves(got)
    why = difference(want, got)
    if not why:
        return None
    return difference(want, got, jax.tree.leaves(
        jax.device_get(exact(*args)) if exact is not None else full_precision(original, *args)))


def compare(original: Callable, optimized: Callable, args_list: Sequence[Sequence],
            exact: Callable | None = None) -> str | None:
    """Run both programs on each list of arguments; the first difference found, or None."""
    for k, args in enumerate(args_list):
        want, got = jax.device_get(original(*args)), jax.device_get(optimized(*args))
        why = differs(original, args, want, got, exact)
        if why:
            return f"on random inputs #{k}: {why}"
    return None
