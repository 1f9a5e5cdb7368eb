"""Reductions, arg-reductions and windowed reductions (pooling)."""
from __future__ import annotations

import numpy as np
from jax import lax
from numpy.lib.stride_tricks import sliding_window_view

from hlo_opt.ir import Node
from hlo_opt.ops.table import REDUCE, WINDOW, primitive_op
from hlo_opt.ops.structural import _pad


def _in_size(node: Node) -> int:
    return node.inputs[0].type.size


def _reduce(fn):
    return lambda p, x: fn(x, axis=tuple(p["axes"]))


def _arg(fn):
    return lambda p, x: fn(x, axis=p["axes"][0])


def _window_flops(node: Node) -> int:
    return node.types[0].size * int(np.prod(node.params["window_dimensions"]))


def window_reference(fn, identity):
    """Pad (edges and base dilation) with the identity, view every window (with window
    dilation), take strides, reduce the window axes."""
    def reference(p, x):
        init = identity(x.dtype)
        config = [(lo, hi, b - 1) for (lo, hi), b in zip(p["padding"], p["base_dilation"])]
        x = _pad({"padding_config": config}, x, init)
        dil = p["window_dilation"]
        span = [(w - 1) * d + 1 for w, d in zip(p["window_dimensions"], dil)]
        view = sliding_window_view(x, span)
        view = view[(Ellipsis,) + tuple(slice(None, None, d) for d in dil)]
        view = view[tuple(slice(None, None, s) for s in p["window_strides"])]
        return fn(view, axis=tuple(range(x.ndim, 2 * x.ndim)))
    return reference


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


for _prim, _fn in [(lax.reduce_sum_p, np.sum), (lax.reduce_max_p, np.max),
                   (lax.reduce_min_p, np.min), (lax.reduce_prod_p, np.prod),
                   (lax.reduce_and_p, np.all), (lax.reduce_or_p, np.any)]:
    primitive_op(_prim, REDUCE, _reduce(_fn), flops=_in_size)

primitive_op(lax.argmax_p, REDUCE, _arg(np.argmax), flops=_in_size)
primitive_op(lax.argmin_p, REDUCE, _arg(np.argmin), flops=_in_size)
primitive_op(lax.reduce_window_sum_p, WINDOW,
             window_reference(np.sum, lambda dt: 0), flops=_window_flops)
primitive_op(lax.reduce_window_max_p, WINDOW,
             window_reference(np.max, _lowest), flops=_window_flops)
primitive_op(lax.reduce_window_min_p, WINDOW,
             window_reference(np.min, _highest), flops=_window_flops)
