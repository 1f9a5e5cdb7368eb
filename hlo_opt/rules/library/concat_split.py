"""Concat and split: merging dots and convs that share an operand (TASO's merged
matmul and conv), elementwise ops moved across concat/split/slice, cancellation of
split-after-concat and concat-after-split, and the geometry of nested concats."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from hlo_opt.rules.lang import Fn, Guard, Pat, Rule, RuleSet, Sym, tensors
from hlo_opt.rules.library.common import (adjacent_halves, binary, concat, dot, kn_weight,
                                          rank, same_params, slice_along, slice_covers,
                                          split2, unary)

x, y, z, a, b, c, d, h, w = tensors("x y z a b c d h w")
ax = Sym("ax")
f, g = unary(), binary()


def _dims_match(p, q, axis) -> Guard:
    """p and q have equal extents on every axis but `axis` (so they concatenate)."""
    def test(m):
        sp, sq = m.shape(p), m.shape(q)
        k = m[axis] if isinstance(axis, Sym) else axis
        return len(sp) == len(sq) and all(i == k or u == v
                                          for i, (u, v) in enumerate(zip(sp, sq)))
    return Guard("concatenable", test)


def _same_shapes(*pairs) -> Guard:
    return Guard("same-shapes", lambda m: all(m.shape(p) == m.shape(q) for p, q in pairs))


def _out_feature(conv_pat) -> Fn:
    return Fn(lambda m: m.params(conv_pat)["dimension_numbers"].out_spec[1])


def _plain_conv(*convs) -> Guard:
    return Guard("ungrouped", lambda m: all(m.params(p)["feature_group_count"] == 1 and
                                            m.params(p)["batch_group_count"] == 1 for p in convs))


# merged dots and convs -------------------------------------------------------------------------
_d1, _d2 = dot(x, a), dot(x, b)
_m = dot(x, concat(a, b, dim=1), like=_d1)
_lhs_split = split2(_m, 1, a, b)
_e1, _e2 = dot(x, w), dot(y, w)
_n = dot(concat(x, y, dim=0), w, like=_e1)
_rhs_split = split2(_n, 0, x, y)
_p1, _p2 = dot(x, a), dot(h, b)
_c1, _c2 = Pat("conv_general_dilated", x, a), Pat("conv_general_dilated", x, b)
_kernel_axis = Fn(lambda m: m.params(_c1)["dimension_numbers"].rhs_spec[0])
_conv_merged = Pat("conv_general_dilated", x, concat(a, b, dim=_kernel_axis), like=_c1)
_conv_split = Pat("split", _conv_merged, axis=_out_feature(_c1),
                  sizes=Fn(lambda m: (m.shape(_c1)[m.params(_c1)["dimension_numbers"].out_spec[1]],
                                      m.shape(_c2)[m.params(_c2)["dimension_numbers"].out_spec[1]])))

MERGE = [
    Rule("merge-dots-shared-lhs", "concat_split", [_d1, _d2], [_lhs_split[0], _lhs_split[1]],
         guards=[same_params(_d1, _d2), rank(a, 2), rank(b, 2)],
         identity="x@a, x@b -> split(x@concat(a,b))",
         example=lambda n: (lambda x, a, b: (x @ a, x @ b), [(n + 1, 3), (3, 2), (3, n + 2)])),
    Rule("merge-dots-shared-rhs", "concat_split", [_e1, _e2], [_rhs_split[0], _rhs_split[1]],
         guards=[same_params(_e1, _e2), rank(x, 2), rank(y, 2)],
         identity="x@w, y@w -> split(concat(x;y)@w)",
         example=lambda n: (lambda x, y, w: (x @ w, jnp.tanh(y @ w)),
                            [(n + 1, 3), (2, 3), (3, 4)])),
    Rule("merge-dot-pair", "concat_split", Pat("add", _p1, _p2),
         dot(concat(x, h, dim=1), concat(a, b, dim=0), like=_p1),
         guards=[same_params(_p1, _p2), rank(x, 2), rank(h, 2)],
         identity="x@a + h@b -> concat(x,h)@concat(a;b)",
         example=lambda n: (lambda x, h, a, b: x @ a + h @ b,
                            [(2, n + 1), (2, 3), (n + 1, 4), (3, 4)])),
    Rule("merge-convs-shared-input", "concat_split", [_c1, _c2],
         [_conv_split[0], _conv_split[1]], guards=[same_params(_c1, _c2), _plain_conv(_c1)],
         identity="conv(x,a), conv(x,b) -> split(conv(x,concat(a,b)))",
         example=lambda n: (_two_convs, [(1, 2, n + 3, 4), (3, 2, 3, 3), (n + 1, 2, 3, 3)])),
]


# A dot's columns in two halves: the merge read backwards. XLA's CPU backend runs a
# 32 x 1024 @ 1024 x 1024 dot (SRU's projections) on one core: as two dots on halves of
# the weight, side by side on two, it read 1.38x faster (the split weight is a weight
# too, precomputed once); 64 x 1024 (BERT's) read 0.83x. The regrouping move
# (`search/groups.py`) prices 2^j pieces per family of like dots.
_wd = Pat("dot_general", x, w)


def _columns(m) -> int:
    return m.shape(w)[1]


def _halvable(m) -> bool:
    """A K x N weight (`kn_weight`) with an even number of columns."""
    return kn_weight(m, _wd, w) and _columns(m) % 2 == 0


SPLIT = [
    Rule("dot-halve-columns", "concat_split", _wd,
         concat(Pat("dot_general", x, slice_along(w, 1, 0, lambda m: _columns(m) // 2), like=_wd),
                Pat("dot_general", x, slice_along(w, 1, lambda m: _columns(m) // 2, _columns),
                    like=_wd),
                dim=Fn(lambda m: len(m.shape(_wd)) - 1)),
         guards=[Guard("even-columns", _halvable)],
         identity="x @ w -> concat(x @ w[:, :n/2], x @ w[:, n/2:])",
         example=lambda n: (lambda x, w: jnp.tanh(x @ w),
                            [((2, 3), (1, 2, 3))[n % 2], (3, 2 * n + 2)])),
]


def _two_convs(x, a, b):
    conv = lambda k: lax.conv_general_dilated(x, k, (1, 1), "SAME")     # noqa: E731
    return conv(a), conv(b) * 2


# cancellation ----------------------------------------------------------------------------------
_xy = concat(x, y, dim=ax)
_sp = Pat("split", _xy, axis=ax)
_whole_split = Pat("split", x, axis=ax)
_sl = Pat("slice", _xy)
_left, _right = Pat("slice", x), Pat("slice", x)
_split_x = Pat("split", x, axis=ax)


def _split_matches_concat(m) -> bool:
    k = m[ax]
    return tuple(m.params(_sp)["sizes"]) == (m.shape(x)[k], m.shape(y)[k])


CANCEL = [
    Rule("split-of-concat", "concat_split", [_sp[0], _sp[1]], [x, y],
         guards=[Guard("sizes-match", _split_matches_concat)],
         identity="split(concat(x,y)) -> x, y",
         example=lambda n: (lambda x, y: [v * 2 for v in _split_cat(x, y, n % 2)],
                            [(2, n + 1), (2, 3)] if n % 2 else [(n + 1, 3), (2, 3)])),
    Rule("concat-of-split", "concat_split", concat(_whole_split[0], _whole_split[1], dim=ax), x,
         guards=[Guard("two-pieces", lambda m: len(m.params(_whole_split)["sizes"]) == 2)],
         identity="concat(split(x)) -> x",
         example=lambda n: (lambda x: _cat_split(x, n % 2) * 2, [(4, 2 * n + 2)])),
    Rule("slice-of-concat-left", "concat_split", _sl, x,
         guards=[slice_covers(_sl, _xy, x, x, ax)],
         identity="concat(x,y)[:len(x)] -> x",
         example=lambda n: (lambda x, y: _slice_cat(x, y, n % 2, True),
                            [(3, n + 1), (3, 2)] if n % 2 else [(n + 1, 2), (3, 2)])),
    Rule("slice-of-concat-right", "concat_split", _sl, y,
         guards=[slice_covers(_sl, _xy, x, y, ax)],
         identity="concat(x,y)[len(x):] -> y",
         example=lambda n: (lambda x, y: _slice_cat(x, y, n % 2, False),
                            [(3, n + 1), (3, 2)] if n % 2 else [(n + 1, 2), (3, 2)])),
    Rule("concat-of-slices", "concat_split",
         Pat("concatenate", _left, _right, dimension=ax), x,
         guards=[adjacent_halves(_left, _right, x, ax)],
         identity="concat(x[:k], x[k:]) -> x",
         example=lambda n: (lambda x: _halves(x, n % 2) * 2, [(n + 2, n + 3)])),
    Rule("split-to-slices", "concat_split", [_split_x[0], _split_x[1]],
         [slice_along(x, ax, 0, lambda m: m.params(_split_x)["sizes"][0]),
          slice_along(x, ax, lambda m: m.params(_split_x)["sizes"][0],
                      lambda m: m.shape(x)[m[ax]])],
         guards=[Guard("two-pieces", lambda m: len(m.params(_split_x)["sizes"]) == 2)],
         identity="split(x) -> x[:k], x[k:]",
         example=lambda n: (lambda x: [v * 2 for v in _split(x, n % 2)], [(4, 2 * n + 2)])),
]


def _split_cat(x, y, axis):
    return jnp.split(jnp.concatenate([x, y], axis), [x.shape[axis]], axis)


def _cat_split(x, axis):
    return jnp.concatenate(jnp.split(x, 2, axis), axis)


def _split(x, axis):
    return jnp.split(x, 2, axis)


def _slice_cat(x, y, axis, left):
    cat = jnp.concatenate([x, y], axis)
    k = x.shape[axis]
    return (cat[:, :k] if left else cat[:, k:]) if axis else (cat[:k] if left else cat[k:])


def _halves(x, axis):
    k = x.shape[axis] // 2
    parts = (x[:, :k], x[:, k:]) if axis else (x[:k], x[k:])
    return jnp.concatenate(parts, axis)


# elementwise ops across concat and slice ---------------------------------------------------------
_ga, _gb = Pat(g, a, c), Pat(g, b, d)
_sl2 = Pat("slice", Pat(f, x))
_sl3 = Pat("slice", Pat(g, x, y))

MOVE = [
    Rule("unary-through-concat", "concat_split", Pat(f, concat(x, y, dim=ax)),
         concat(Pat(f, x), Pat(f, y), dim=ax), identity="f(concat(x,y)) -> concat(f(x),f(y))",
         example=lambda n: (lambda x, y: _unary(n)(_cat(x, y, n % 2)), [(2, 3), (2, 3)])),
    Rule("concat-of-unary", "concat_split", concat(Pat(f, x), Pat(f, y), dim=ax),
         Pat(f, concat(x, y, dim=ax)), identity="concat(f(x),f(y)) -> f(concat(x,y))",
         example=lambda n: (lambda x, y: _cat(_unary(n)(x), _unary(n)(y), n % 2),
                            [(2, 3), (2, 3)])),
    Rule("binary-through-concat", "concat_split",
         Pat(g, concat(a, b, dim=ax), concat(c, d, dim=ax)),
         concat(Pat(g, a, c), Pat(g, b, d), dim=ax), guards=[_same_shapes((a, c), (b, d))],
         identity="g(concat(a,b), concat(c,d)) -> concat(g(a,c), g(b,d))",
         example=lambda n: (lambda a, b, c, d: _binary(n)(_cat(a, b, 1), _cat(c, d, 1)),
                            [(2, n + 1), (2, 2)] * 2)),
    Rule("concat-of-binary", "concat_split", concat(_ga, _gb, dim=ax),
         Pat(g, concat(a, b, dim=ax), concat(c, d, dim=ax)),
         guards=[_same_shapes((a, c), (b, d)), _dims_match(a, b, ax)],
         identity="concat(g(a,c), g(b,d)) -> g(concat(a,b), concat(c,d))",
         example=lambda n: (lambda a, b, c, d: _cat(_binary(n)(a, c), _binary(n)(b, d), 0),
                            [(n + 1, 2), (2, 2)] * 2)),
    Rule("unary-through-slice", "concat_split", _sl2, Pat(f, Pat("slice", x, like=_sl2)),
         identity="f(x)[s] -> f(x[s])",
         example=lambda n: (lambda x: _unary(n)(x)[1:, : n + 1], [(3, 4)])),
    Rule("binary-through-slice", "concat_split", _sl3,
         Pat(g, Pat("slice", x, like=_sl3), Pat("slice", y, like=_sl3)),
         guards=[_same_shapes((x, y))], identity="g(x,y)[s] -> g(x[s], y[s])",
         example=lambda n: (lambda x, y: _binary(n)(x, y)[: n + 1], [(4, 2), (4, 2)])),
]


def _unary(n):
    return (jnp.tanh, jax.nn.relu, jnp.exp)[n % 3]


def _binary(n):
    return (jnp.add, jnp.multiply, jnp.maximum)[n % 3]


def _cat(x, y, axis):
    return jnp.concatenate([x, y], axis)


# concat geometry (TASO's split tree) -----------------------------------------------------------
_inner = concat(x, y, dim=ax)
_outer0, _outer1 = concat(a, b, dim=0), concat(c, d, dim=0)

GEOMETRY = [
    Rule("concat-flatten", "concat_split", concat(_inner, z, dim=ax),
         Pat("concatenate", x, y, z, dimension=ax),
         identity="concat(concat(x,y),z) -> concat(x,y,z)",
         example=lambda n: (lambda x, y, z: _cat(_cat(x, y, 1), z, 1),
                            [(2, n + 1), (2, 2), (2, 1)])),
    Rule("concat-nest", "concat_split", Pat("concatenate", x, y, z, dimension=ax),
         concat(concat(x, y, dim=ax), z, dim=ax),
         identity="concat(x,y,z) -> concat(concat(x,y),z)",
         example=lambda n: (lambda x, y, z: _cat3(x, y, z), [(n + 1, 2), (1, 2), (2, 2)])),
    Rule("concat-geometry", "concat_split", concat(_outer0, _outer1, dim=1),
         concat(concat(a, c, dim=1), concat(b, d, dim=1), dim=0),
         guards=[rank(a, 2), Guard("rows-align", lambda m: m.shape(a)[0] == m.shape(c)[0]
                                   and m.shape(b)[0] == m.shape(d)[0])],
         identity="concat1(concat0(a,b), concat0(c,d)) -> concat0(concat1(a,c), concat1(b,d))",
         example=lambda n: (lambda a, b, c, d: _cat(_cat(a, b, 0), _cat(c, d, 0), 1),
                            [(2, n + 1)] * 2 + [(2, 2)] * 2)),
]


def _cat3(x, y, z):
    return jnp.concatenate([x, y, z], 0)


RULES = RuleSet(MERGE + SPLIT + CANCEL + MOVE + GEOMETRY)
