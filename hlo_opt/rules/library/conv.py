"""Convolution: grouped convs split in halves or made dense with a block-diagonal
kernel, kernels enlarged with zeros (so a 1x1 can merge with a 3x3 sibling), two convs
summed as one on concatenated inputs, average pooling as a depthwise conv, conv's
linearity in each argument, and a 1x1 NHWC conv as a matmul."""
from __future__ import annotations

import numpy as np
from jax import lax

from hlo_opt import ops
from hlo_opt.ir import TensorType
from hlo_opt.rules.lang import Build, Const, Fn, Guard, Pat, Rule, RuleSet, tensors
from hlo_opt.rules.library.common import (concat, conv_axes, same_params, slice_along,
                                         unwidened)

x, y, w, a, b = tensors("x y w a b")
CONV = "conv_general_dilated"


def conv(p, q, **params) -> Pat:
    return Pat(CONV, p, q, **params)


def plain(*convs) -> Guard:
    return Guard("ungrouped", lambda m: all(m.params(c)["feature_group_count"] == 1 and
                                            m.params(c)["batch_group_count"] == 1 for c in convs))


def unit_strides(c) -> Guard:
    def test(m):
        p = m.params(c)
        return all(s == 1 for s in (*p["window_strides"], *p["lhs_dilation"],
                                    *p["rhs_dilation"]))
    return Guard("unit-strides", test)


# grouped convs ----------------------------------------------------------------------------------
_g = conv(x, w)


def _piece(k):
    """Half k of the grouped conv: its input channels and its kernels."""
    cx = Fn(lambda m: conv_axes(m, _g)[0])
    ko = Fn(lambda m: conv_axes(m, _g)[1])
    hx = lambda m: m.shape(x)[conv_axes(m, _g)[0]] // 2       # noqa: E731
    hw = lambda m: m.shape(w)[conv_axes(m, _g)[1]] // 2       # noqa: E731
    xs = slice_along(x, cx, (lambda m: k * hx(m)), (lambda m: (k + 1) * hx(m)))
    ws = slice_along(w, ko, (lambda m: k * hw(m)), (lambda m: (k + 1) * hw(m)))
    return conv(xs, ws, like=_g,
                feature_group_count=Fn(lambda m: m.params(_g)["feature_group_count"] // 2))


_even = Guard("even-groups", lambda m: m.params(_g)["feature_group_count"] % 2 == 0
              and m.params(_g)["batch_group_count"] == 1)


def block_diagonal(m):
    """The dense kernel of grouped conv `_g`: group k's kernels, zero-padded on the
    input-channel axis to sit on block k of the diagonal."""
    _, o_axis, i_axis, _ = conv_axes(m, _g)
    kernel = m[w]
    groups = m.params(_g)["feature_group_count"]
    per_out, per_in = kernel.type.shape[o_axis] // groups, kernel.type.shape[i_axis]
    zero = ops.make_const(np.zeros((), kernel.type.dtype),
                          TensorType((), kernel.type.dtype)).out()
    blocks = []
    for k in range(groups):
        lo = tuple(k * per_out if i == o_axis else 0 for i in range(len(kernel.type.shape)))
        hi = tuple((k + 1) * per_out if i == o_axis else n for i, n in enumerate(kernel.type.shape))
        piece = ops.make("slice", [kernel], start_indices=lo, limit_indices=hi,
                         strides=None).out()
        config = tuple((k * per_in, (groups - 1 - k) * per_in, 0) if i == i_axis else (0, 0, 0)
                       for i in range(len(kernel.type.shape)))
        blocks.append(ops.make("pad", [piece, zero], padding_config=config).out())
    dense = blocks[-1]
    for block in reversed(blocks[:-1]):          # nested two-way concats
        dense = ops.make("concatenate", [block, dense], dimension=o_axis).out()
    return dense


GROUPED = [
    Rule("grouped-conv-halve", "conv", _g,
         concat(_piece(0), _piece(1), dim=Fn(lambda m: conv_axes(m, _g)[3])), guards=[_even],
         identity="conv_G(x, w) -> concat(conv_G/2(x1, w1), conv_G/2(x2, w2))",
         example=lambda n: (lambda x, w: _grouped(x, w, 2 * (n % 2 + 1)),
                            [(1, 4, n + 3, 3), (4 * (n % 2 + 1), 4 // (2 * (n % 2 + 1)), 3, 3)])),
    Rule("grouped-conv-to-dense", "conv", _g,
         conv(x, Build(block_diagonal), like=_g, feature_group_count=1),
         guards=[Guard("grouped", lambda m: m.params(_g)["feature_group_count"] > 1
                       and m.params(_g)["batch_group_count"] == 1)],
         identity="conv_G(x, w) -> conv(x, blockdiag(w))",
         example=lambda n: (lambda x, w: _grouped(x, w, 2), [(1, 4, n + 3, 3), (2 + 2 * n, 2, 3, 3)])),
]


def _grouped(x, w, groups):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=groups)


# enlarge, fuse, pool ----------------------------------------------------------------------------
_c = conv(x, w)
_s1, _s2 = conv(x, a), conv(y, b)
_pool = Pat("reduce_window_sum", x)


def _enlarged_padding(m):
    return tuple((lo + 1, hi + 1) for lo, hi in m.params(_c)["padding"])


def _kernel_pad(m):
    spatial = set(m.params(_c)["dimension_numbers"].rhs_spec[2:])
    return tuple((1, 1, 0) if i in spatial else (0, 0, 0) for i in range(len(m.shape(w))))


def _pool_ok(m) -> bool:
    p = m.params(_pool)
    return (len(m.shape(x)) == 4 and tuple(p["window_dimensions"][:2]) == (1, 1)
            and tuple(p["window_strides"][:2]) == (1, 1)
            and all(d == 1 for d in p["base_dilation"])
            and tuple(p["padding"][:2]) == ((0, 0), (0, 0)))


def _pool_param(key):
    return Fn(lambda m: tuple(m.params(_pool)[key][2:]))


_concat_inputs = Guard("concatenable-inputs", lambda m: all(
    u == v or i == conv_axes(m, _s1)[0] for i, (u, v) in enumerate(zip(m.shape(x), m.shape(y)))))

FUSE = [
    Rule("enlarge-kernel", "conv", _c,
         conv(x, Pat("pad", w, Const(0.0, w), padding_config=Fn(_kernel_pad)), like=_c,
              padding=Fn(_enlarged_padding)),
         guards=[unit_strides(_c)], identity="conv(x, w) -> conv(x, pad(w) with zeros)",
         example=lambda n: (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"),
                            [(1, 2, n + 3, 4), (3, 2, 1 + 2 * (n % 2), 1)])),
    Rule("conv-add-fusion", "conv", Pat("add", _s1, _s2),
         conv(concat(x, y, dim=Fn(lambda m: conv_axes(m, _s1)[0])),
              concat(a, b, dim=Fn(lambda m: conv_axes(m, _s1)[2])), like=_s1),
         guards=[same_params(_s1, _s2), plain(_s1), _concat_inputs],
         identity="conv(x,a) + conv(y,b) -> conv(concat(x,y), concat(a,b))",
         example=lambda n: (lambda x, y, a, b: _same(x, a) + _same(y, b),
                            [(1, 2, n + 3, 3), (1, 3, n + 3, 3), (2, 2, 3, 3), (2, 3, 3, 3)])),
    Rule("avgpool-as-conv", "conv", _pool,
         conv(x, Pat("broadcast_in_dim", Const(1.0, x), broadcast_dimensions=(), sharding=None,
                     shape=Fn(lambda m: (m.shape(x)[1], 1,
                                         *m.params(_pool)["window_dimensions"][2:]))),
              window_strides=_pool_param("window_strides"), padding=_pool_param("padding"),
              lhs_dilation=(1, 1), rhs_dilation=_pool_param("window_dilation"),
              dimension_numbers=lax.ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3),
                                                         (0, 1, 2, 3)),
              feature_group_count=Fn(lambda m: m.shape(x)[1]), batch_group_count=1,
              precision=None, preferred_element_type=None, out_sharding=None),
         guards=[Guard("nchw-pool", _pool_ok)], identity="sum_pool(x) -> depthwise_conv(x, ones)",
         example=lambda n: (lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, n % 2 + 2),
                                                        (1, 1, n % 2 + 1, 1), "VALID"),
                            [(1, 2, n + 3, 4)])),
]


def _same(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME")


# linearity --------------------------------------------------------------------------------------
_li, _lk = conv(Pat("add", x, y), w), conv(x, Pat("add", a, b))
_f1, _f2 = conv(x, w), conv(y, w)
_k1, _k2 = conv(x, a), conv(x, b)

LINEAR = [
    Rule("conv-linear-input", "conv", _li,
         Pat("add", conv(x, w, like=_li), conv(y, w, like=_li)),
         guards=[unwidened(_li)],
         identity="conv(x+y, w) -> conv(x,w) + conv(y,w)",
         example=lambda n: (lambda x, y, w: _same(x + y, w), [(1, 2, n + 3, 3)] * 2 + [(2, 2, 3, 3)])),
    Rule("conv-linear-kernel", "conv", _lk,
         Pat("add", conv(x, a, like=_lk), conv(x, b, like=_lk)),
         guards=[unwidened(_lk)],
         identity="conv(x, a+b) -> conv(x,a) + conv(x,b)",
         example=lambda n: (lambda x, a, b: _same(x, a + b), [(1, 2, n + 3, 3)] + [(2, 2, 3, 3)] * 2)),
    Rule("conv-factor-input", "conv", Pat("add", _f1, _f2), conv(Pat("add", x, y), w, like=_f1),
         guards=[same_params(_f1, _f2), unwidened(_f1, _f2),
                 Guard("same-shapes", lambda m: m.shape(x) == m.shape(y))],
         identity="conv(x,w) + conv(y,w) -> conv(x+y, w)",
         example=lambda n: (lambda x, y, w: _same(x, w) + _same(y, w),
                            [(1, 2, n + 3, 3)] * 2 + [(2, 2, 3, 3)])),
    Rule("conv-factor-kernel", "conv", Pat("add", _k1, _k2), conv(x, Pat("add", a, b), like=_k1),
         guards=[same_params(_k1, _k2), unwidened(_k1, _k2),
                 Guard("same-shapes", lambda m: m.shape(a) == m.shape(b))],
         identity="conv(x,a) + conv(x,b) -> conv(x, a+b)",
         example=lambda n: (lambda x, a, b: _same(x, a) + _same(x, b),
                            [(1, 2, n + 3, 3)] + [(2, 2, 3, 3)] * 2)),
]

# 1x1 convs as matmuls ---------------------------------------------------------------------------
# An NHWC 1x1 conv is a matmul of the (N*H*W, C) pixels by the (C, O) kernel; the
# reshapes are free (row-major, contiguous). XLA CPU runs the matmul 1.2-2.1x faster than
# its conv kernel (measured on ResNet-50's 1x1 shapes, 2-core CPU, jax 0.10.2).
_c1 = conv(x, w, dimension_numbers=lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1),
                                                            (0, 3, 1, 2)))


def _pointwise(strided: bool) -> Guard:
    def test(m):
        p = m.params(_c1)
        return (m.shape(w)[:2] == (1, 1) and p["feature_group_count"] == 1
                and p["batch_group_count"] == 1 and all(lo == hi == 0 for lo, hi in p["padding"])
                and all(d == 1 for d in (*p["lhs_dilation"], *p["rhs_dilation"]))
                and any(s != 1 for s in p["window_strides"]) == strided)
    return Guard("strided-1x1" if strided else "unit-1x1", test)


def _reshape(v, shape) -> Pat:
    return Pat("reshape", v, new_sizes=Fn(shape), dimensions=None, sharding=None)


def _as_dot(pixels) -> Pat:
    """reshape(pixels (N,H,W,C) @ w (C,O)) to the conv's output shape."""
    flat = _reshape(pixels, lambda m: (int(np.prod(m.shape(_c1)[:3])), m.shape(w)[2]))
    kernel = _reshape(w, lambda m: m.shape(w)[2:])
    product = Pat("dot_general", flat, kernel, dimension_numbers=(((1,), (0,)), ((), ())),
                  precision=Fn(lambda m: m.params(_c1)["precision"]),
                  preferred_element_type=Fn(lambda m: m.params(_c1)["preferred_element_type"]),
                  out_sharding=None)
    return _reshape(product, lambda m: m.shape(_c1))


def _nhwc1x1(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _window_taps(m) -> list[tuple[int, int]]:
    return [(i, j) for i in range(m.shape(w)[0]) for j in range(m.shape(w)[1])]


def _im2col(kh: int, kw: int) -> Pat:
    """The conv at `_c1` (a kh x kw kernel) as one matmul: the zero-padded input's
    kh*kw shifted (strided) windows side by side on the channel axis, times the kernel
    read as a (kh*kw*C, O) matrix (HWIO's row-major order is tap by tap, then channel)."""
    padded = _padded()
    cols = Pat("concatenate", *[_window(padded, i, j) for i in range(kh) for j in range(kw)],
               dimension=3)
    flat = _reshape(cols, lambda m: (int(np.prod(m.shape(_c1)[:3])), kh * kw * m.shape(x)[3]))
    kernel = _reshape(w, lambda m: (kh * kw * m.shape(w)[2], m.shape(w)[3]))
    product = Pat("dot_general", flat, kernel, dimension_numbers=(((1,), (0,)), ((), ())),
                  precision=Fn(lambda m: m.params(_c1)["precision"]),
                  preferred_element_type=Fn(lambda m: m.params(_c1)["preferred_element_type"]),
                  out_sharding=None)
    return _reshape(product, lambda m: m.shape(_c1))


def _dense3x3(m) -> bool:
    p = m.params(_c1)
    return (m.shape(w)[:2] == (3, 3) and p["feature_group_count"] == 1
            and p["batch_group_count"] == 1 and all(lo >= 0 and hi >= 0 for lo, hi in p["padding"])
            and all(s == 1 for s in (*p["lhs_dilation"], *p["rhs_dilation"])))


def _depthwise(m) -> bool:
    """`_c1` is a depthwise 3x3 conv (one input channel per group, as many groups as
    channels), undilated, zero or positive padding, no preferred output type."""
    p = m.params(_c1)
    c = m.shape(x)[3]
    return (m.shape(w) == (3, 3, 1, c) and p["feature_group_count"] == c > 1
            and p["batch_group_count"] == 1 and p["preferred_element_type"] is None
            and all(lo >= 0 and hi >= 0 for lo, hi in p["padding"])
            and all(d == 1 for d in (*p["lhs_dilation"], *p["rhs_dilation"])))


def _padded() -> Pat:
    """The NHWC conv at `_c1`'s input, zero-padded as the conv pads it: one node that
    all of its taps' windows read (`_window`). A pad per tap made 9 like pads and 9
    zeros per conv, which XLA merges; the search does not, and Inception-v3's small
    config with 11 convs as im2col grew from 119 to 560 nodes, 99 of them pads."""
    pads = Fn(lambda m: ((0, 0, 0), *[(lo, hi, 0) for lo, hi in m.params(_c1)["padding"]],
                         (0, 0, 0)))
    return Pat("pad", x, Const(0.0, x), padding_config=pads)


def _window(padded: Pat, i: int, j: int) -> Pat:
    """Tap (i, j)'s window of the NHWC conv at `_c1`: its `padded` input from row i and
    column j, every stride-th row and column, as many as the conv has outputs."""
    def strides(m):
        sh, sw = m.params(_c1)["window_strides"]
        return None if sh == sw == 1 else (1, sh, sw, 1)

    def limit(m):
        (n, ho, wo, _), (sh, sw) = m.shape(_c1), m.params(_c1)["window_strides"]
        return (n, i + (ho - 1) * sh + 1, j + (wo - 1) * sw + 1, m.shape(x)[3])
    return Pat("slice", padded, start_indices=(0, i, j, 0), limit_indices=Fn(limit),
               strides=Fn(strides))


def _taps(k: int) -> Pat:
    """The depthwise conv at `_c1` as a sum over its k*k taps of a shifted (strided)
    window of the zero-padded input times that tap's per-channel weights (a 1x1xC
    slice of the frozen kernel): elementwise work XLA fuses into one loop."""
    def tap(i, j):
        return Pat("slice", w, start_indices=(i, j, 0, 0), strides=None,
                   limit_indices=Fn(lambda m: (i + 1, j + 1, 1, m.shape(w)[3])))
    padded = _padded()
    terms = [Pat("mul", _window(padded, i, j), tap(i, j)) for i in range(k) for j in range(k)]
    total = terms[0]
    for t in terms[1:]:
        total = Pat("add", total, t)
    return total


_every_stride = Pat("slice", x, start_indices=(0, 0, 0, 0),
                    limit_indices=Fn(lambda m: m.shape(x)), strides=Fn(
                        lambda m: (1, *m.params(_c1)["window_strides"], 1)))

MATMUL = [
    Rule("conv1x1-as-dot", "conv", _c1, _as_dot(x), guards=[_pointwise(False)],
         identity="conv_NHWC(x, w_1x1) -> reshape(reshape(x) @ reshape(w))",
         example=lambda n: (_nhwc1x1, [(1, n + 2, 3, 4), (1, 1, 4, n + 1)])),
    Rule("strided-conv1x1-as-dot", "conv", _c1, _as_dot(_every_stride),
         guards=[_pointwise(True)],
         identity="conv_NHWC(x, w_1x1, stride s) -> reshape(reshape(x[:, ::s, ::s]) @ reshape(w))",
         example=lambda n: (lambda x, w: _nhwc1x1(x, w, 2), [(1, n + 4, 4, 3), (1, 1, 3, 2)])),
    # XLA CPU's conv kernel is slow on small images with many channels: a 3x3 conv on
    # 7x7x512 ran 1.8x faster as im2col + matmul; on 56x56x64 it ran 0.56x; strided,
    # 14x14x512 to 7x7 1.6-1.8x, 56x56x128 to 28x28 0.67x (the cost model decides,
    # per conv).
    Rule("conv3x3-as-im2col", "conv", _c1, _im2col(3, 3),
         guards=[Guard("dense-3x3", _dense3x3)],
         identity="conv_NHWC(x, w_3x3) -> reshape(concat(9 strided windows of pad(x)) @ reshape(w))",
         example=lambda n: (lambda x, w: lax.conv_general_dilated(
             x, w, (n % 2 + 1, 1), ("SAME", "VALID", ((0, 1), (1, 0)))[n],
             dimension_numbers=("NHWC", "HWIO", "NHWC")), [(1, 4, n + 3, 2), (3, 3, 2, 3)])),
    # XLA CPU's depthwise conv kernel is 11-27x slower than the same work as fused
    # multiply-adds (NASNet-A's separable convs, measured on this 2-core CPU).
    Rule("depthwise-conv3x3-as-taps", "conv", _c1, _taps(3),
         guards=[Guard("depthwise-3x3", _depthwise)],
         identity="depthwise_conv_NHWC(x, w_3x3) -> sum_ij window_ij(pad(x)) * w[i, j]",
         example=lambda n: (lambda x, w: lax.conv_general_dilated(
             x, w, (n % 2 + 1, n % 2 + 1), ("SAME", "VALID", ((0, 1), (1, 0)))[n],
             dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=3),
             [(1, 5, n + 4, 3), (3, 3, 1, 3)])),
]

RULES = RuleSet(MATMUL + GROUPED + FUSE + LINEAR)
