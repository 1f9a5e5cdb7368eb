"""Layout and data-movement ops: transpose, reshape, broadcast, concat/split, slicing,
padding, reversal, iota.  They move data and compute nothing (0 FLOPs)."""
from __future__ import annotations

import numpy as np
from jax import lax

from hlo_opt.ops.table import INDEX, LAYOUT, SOURCE, primitive_op


def _broadcast_in_dim(p, x):
    shape = p["shape"]
    expanded = [1] * len(shape)
    for src, dst in enumerate(p["broadcast_dimensions"]):
        expanded[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(expanded), shape)


def _reshape(p, x):
    if p.get("dimensions") is not None:
        x = np.transpose(x, p["dimensions"])
    return x.reshape(p["new_sizes"])


def _split(p, x):
    bounds = np.cumsum(p["sizes"])[:-1]
    return list(np.split(x, bounds, axis=p["axis"]))


def _slice(p, x):
    strides = p["strides"] or (1,) * x.ndim
    return x[tuple(slice(s, e, st) for s, e, st in
                   zip(p["start_indices"], p["limit_indices"], strides))]


def _pad(p, x, value):
    """lax.pad: per dim (low, high, interior); negative low/high crop."""
    for axis, (lo, hi, interior) in enumerate(p["padding_config"]):
        n = x.shape[axis]
        size = n + max(n - 1, 0) * interior
        shape = list(x.shape)
        shape[axis] = size
        out = np.full(shape, value, dtype=x.dtype)
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(0, size, interior + 1)
        out[tuple(idx)] = x
        pad = [(0, 0)] * x.ndim
        pad[axis] = (max(lo, 0), max(hi, 0))
        out = np.pad(out, pad, constant_values=value)
        crop = [slice(None)] * x.ndim
        crop[axis] = slice(max(-lo, 0), out.shape[axis] - max(-hi, 0))
        x = out[tuple(crop)]
    return x


def _iota(p):
    shape, dim = p["shape"], p["dimension"]
    expanded = [1] * len(shape)
    expanded[dim] = shape[dim]
    return np.broadcast_to(np.arange(shape[dim]).reshape(expanded), shape)


def _clamped_starts(operand_shape, sizes, starts):
    return [int(np.clip(int(s), 0, d - z)) for s, d, z in zip(starts, operand_shape, sizes)]


def _dynamic_slice(p, x, *starts):
    begin = _clamped_starts(x.shape, p["slice_sizes"], starts)
    return x[tuple(slice(b, b + z) for b, z in zip(begin, p["slice_sizes"]))]


def _dynamic_update_slice(p, x, update, *starts):
    begin = _clamped_starts(x.shape, update.shape, starts)
    out = np.array(x)
    out[tuple(slice(b, b + z) for b, z in zip(begin, update.shape))] = update
    return out


primitive_op(lax.transpose_p, LAYOUT, lambda p, x: np.transpose(x, p["permutation"]))
primitive_op(lax.reshape_p, LAYOUT, _reshape)
primitive_op(lax.broadcast_in_dim_p, LAYOUT, _broadcast_in_dim)
primitive_op(lax.squeeze_p, LAYOUT, lambda p, x: np.squeeze(x, axis=tuple(p["dimensions"])))
primitive_op(lax.concatenate_p, LAYOUT, lambda p, *xs: np.concatenate(xs, axis=p["dimension"]))
primitive_op(lax.split_p, LAYOUT, _split)
primitive_op(lax.stack_p, LAYOUT, lambda p, *xs: np.stack(xs, axis=p["axis"]))
primitive_op(lax.rev_p, LAYOUT, lambda p, x: np.flip(x, axis=tuple(p["dimensions"])))
primitive_op(lax.slice_p, LAYOUT, _slice)
primitive_op(lax.pad_p, LAYOUT, _pad)
primitive_op(lax.iota_p, SOURCE, _iota, flops=lambda node: 0)
primitive_op(lax.dynamic_slice_p, INDEX, _dynamic_slice)
primitive_op(lax.dynamic_update_slice_p, INDEX, _dynamic_update_slice)
