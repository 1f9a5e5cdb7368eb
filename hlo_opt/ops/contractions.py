"""Contractions (dot_general, conv_general_dilated) and gather."""
from __future__ import annotations

import itertools

import numpy as np
from jax import lax
from numpy.lib.stride_tricks import sliding_window_view

from hlo_opt.ir import Node
from hlo_opt.ops.structural import _pad
from hlo_opt.ops.table import CONTRACT, INDEX, as_float64, primitive_op


def _dot_general(p, lhs, rhs):
    (lc, rc), (lb, rb) = p["dimension_numbers"]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lhs_ix = [next(letters) for _ in range(lhs.ndim)]
    rhs_ix = [next(letters) for _ in range(rhs.ndim)]
    for l, r in zip(list(lc) + list(lb), list(rc) + list(rb)):
        rhs_ix[r] = lhs_ix[l]
    out = [lhs_ix[d] for d in lb]
    out += [lhs_ix[d] for d in range(lhs.ndim) if d not in lc and d not in lb]
    out += [rhs_ix[d] for d in range(rhs.ndim) if d not in rc and d not in rb]
    spec = f"{''.join(lhs_ix)},{''.join(rhs_ix)}->{''.join(out)}"
    return np.einsum(spec, as_float64(lhs), as_float64(rhs))


def _dot_flops(node: Node) -> int:
    (lc, _), _ = node.params["dimension_numbers"]
    lhs = node.inputs[0].type.shape
    return 2 * node.types[0].size * int(np.prod([lhs[d] for d in lc]))


def _conv(p, lhs, rhs):
    """Reference convolution in N C spatial / O I spatial order via explicit windows."""
    dn = p["dimension_numbers"]
    lhs = as_float64(np.transpose(lhs, dn.lhs_spec))     # N C S...
    rhs = as_float64(np.transpose(rhs, dn.rhs_spec))     # O I S...
    nsp = lhs.ndim - 2
    config = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in
                                       zip(p["padding"], p["lhs_dilation"])]
    lhs = _pad({"padding_config": config}, lhs, 0.0)
    rhs = _pad({"padding_config": [(0, 0, 0), (0, 0, 0)] +
                [(0, 0, d - 1) for d in p["rhs_dilation"]]}, rhs, 0.0)
    windows = sliding_window_view(lhs, rhs.shape[2:], axis=tuple(range(2, 2 + nsp)))
    windows = windows[(slice(None), slice(None)) +
                      tuple(slice(None, None, s) for s in p["window_strides"])]
    groups, batch_groups = p["feature_group_count"], p["batch_group_count"]
    out_blocks = []
    rhs_chunks = np.split(rhs, groups * batch_groups, axis=0)
    lhs_batches = np.split(windows, batch_groups, axis=0)
    for b, g in itertools.product(range(batch_groups), range(groups)):
        lhs_g = np.split(lhs_batches[b], groups, axis=1)[g]
        spatial = "xyzw"[:nsp]
        spec = f"nc{spatial}{spatial.upper()},oc{spatial.upper()}->no{spatial}"
        out_blocks.append(np.einsum(spec, lhs_g, rhs_chunks[b * groups + g]))
    out = np.concatenate(out_blocks, axis=1)                     # N O S...
    return np.transpose(out, np.argsort(dn.out_spec))


def _conv_flops(node: Node) -> int:
    rhs = node.inputs[1].type
    out_features = rhs.shape[node.params["dimension_numbers"].rhs_spec[0]]
    return 2 * node.types[0].size * (rhs.size // out_features)


def _gather(p, operand, indices):
    """XLA gather, one batch position at a time (index vector is the last dim)."""
    dn, sizes = p["dimension_numbers"], p["slice_sizes"]
    mode = p["mode"]
    fill = lax.GatherScatterMode.FILL_OR_DROP == mode
    batch_shape = indices.shape[:-1]
    squeezed = tuple(dn.collapsed_slice_dims) + tuple(dn.operand_batching_dims)
    slice_shape = [s for d, s in enumerate(sizes) if d not in squeezed]
    out = np.empty(batch_shape + tuple(slice_shape), dtype=operand.dtype)
    for b in np.ndindex(*batch_shape):
        start = [0] * operand.ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = int(indices[b][k])
        for od, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[od] = b[idim if idim < len(batch_shape) else idim - 1]
        in_bounds = all(0 <= start[d] <= operand.shape[d] - sizes[d] for d in range(operand.ndim))
        if fill and not in_bounds:
            value = p["fill_value"]
            out[b] = np.nan if value is None and operand.dtype.kind == "f" else (value or 0)
            continue
        start = [int(np.clip(s, 0, n - z)) for s, n, z in zip(start, operand.shape, sizes)]
        piece = operand[tuple(slice(s, s + z) for s, z in zip(start, sizes))]
        out[b] = piece.reshape(slice_shape)
    nb = len(batch_shape)
    return np.moveaxis(out, list(range(nb, out.ndim)), list(dn.offset_dims))


primitive_op(lax.dot_general_p, CONTRACT, _dot_general, flops=_dot_flops)
primitive_op(lax.conv_general_dilated_p, CONTRACT, _conv, flops=_conv_flops)
primitive_op(lax.gather_p, INDEX, _gather)
