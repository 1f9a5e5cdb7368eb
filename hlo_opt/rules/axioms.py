"""The axioms: operator properties the rules are proven from (TASO's Table 2, extended
to our ops and their params). Each is written in the rule language, so the matcher
instantiates it; each is validated by symbolic execution on small tensors (verify.py).
Every example keeps every dim at 3 or below and walks the param values that fit."""
from __future__ import annotations

import itertools

import jax.numpy as jnp
from jax import lax

from hlo_opt.rules.library import concat_split as CS
from hlo_opt.rules.library import conv as C
from hlo_opt.rules.library import layout as L
from hlo_opt.rules.library import slices as SL
from hlo_opt.rules.lang import Fn, Guard, Pat, Rule, RuleSet, Sym, tensors
from hlo_opt.rules.library.common import (adjacent_halves, binary, concat, dot, is_zero,
                                          same_params, scalar, slice_along, slice_covers,
                                          unary)

x, y, z, a, b, c, d, h, s, w = tensors("x y z a b c d h s w")


def add(p, q):
    return Pat("add", p, q)


def mul(p, q):
    return Pat("mul", p, q)


def axiom(name, src, tgt, example, guards=(), cases=3, identity=""):
    return Rule(f"ax-{name}", "axiom", src, tgt, guards=guards, example=example,
                cases=cases, identity=identity)


_d = dot(x, a)
_dd = dot(_d, b)
_l, _r = dot(add(x, y), a), dot(x, add(a, b))
_sl, _sr = dot(mul(s, x), w), dot(x, mul(s, w))

ALGEBRA = [
    axiom("add-comm", add(x, y), add(y, x), lambda n: (lambda x, y: x + y, [(n + 1,)] * 2)),
    axiom("add-assoc", add(add(x, y), z), add(x, add(y, z)),
          lambda n: (lambda x, y, z: (x + y) + z, [(n + 1,)] * 3)),
    axiom("mul-comm", mul(x, y), mul(y, x), lambda n: (lambda x, y: x * y, [(n + 1,)] * 2)),
    axiom("mul-assoc", mul(mul(x, y), z), mul(x, mul(y, z)),
          lambda n: (lambda x, y, z: (x * y) * z, [(n + 1,)] * 3)),
    axiom("distribute", mul(x, add(y, z)), add(mul(x, y), mul(x, z)),
          lambda n: (lambda x, y, z: x * (y + z), [(n + 1,)] * 3)),
    axiom("sub", Pat("sub", x, y), add(x, Pat("neg", y)),
          lambda n: (lambda x, y: x - y, [(n + 1,)] * 2)),
    axiom("neg-neg", Pat("neg", Pat("neg", x)), x,
          lambda n: (lambda x: -(-x) * 2, [(n + 1,)])),
    axiom("dot-assoc", _dd, dot(x, dot(a, b, like=_d), like=_dd),
          lambda n: (lambda x, a, b: (x @ a) @ b, [(n + 1, 2), (2, 3), (3, n + 1)]),
          guards=[same_params(_d, _dd)]),
    axiom("dot-linear-lhs", _l, add(dot(x, a, like=_l), dot(y, a, like=_l)),
          lambda n: (lambda x, y, a: (x + y) @ a, [(n + 1, 2)] * 2 + [(2, 3)])),
    axiom("dot-linear-rhs", _r, add(dot(x, a, like=_r), dot(x, b, like=_r)),
          lambda n: (lambda x, a, b: x @ (a + b), [(2, n + 1)] + [(n + 1, 2)] * 2)),
    axiom("dot-scalar-lhs", _sl, mul(s, dot(x, w, like=_sl)),
          lambda n: (lambda s, x, w: (s * x) @ w, [(), (n + 1, 2), (2, 3)]),
          guards=[scalar(s)]),
    axiom("dot-scalar-rhs", _sr, mul(s, dot(x, w, like=_sr)),
          lambda n: (lambda s, x, w: x @ (s * w), [(), (n + 1, 2), (2, 3)]),
          guards=[scalar(s)]),
]


# concat, split and slice ----------------------------------------------------------------------
ax = Sym("ax")
f, g = unary(), binary()
_cat = concat(x, y, dim=ax)
_sl = Pat("slice", _cat)
_sp = Pat("split", x, axis=ax)
_lo, _hi = Pat("slice", x), Pat("slice", x)
_fs, _gs = Pat("slice", Pat(f, x)), Pat("slice", Pat(g, x, y))
_dr, _dl = dot(x, concat(a, b, dim=1)), dot(concat(x, y, dim=0), w)
_dc = dot(concat(x, h, dim=1), concat(a, b, dim=0))
_cv = Pat("conv_general_dilated", x, concat(a, b, dim=0))




def _axis_cases(n):
    """n -> (rank-2 shapes of two concatenable tensors, axis), walking both axes."""
    k = n % 2
    return ([(n % 3 + 1, 2), (2, 2)] if k == 0 else [(2, n % 3 + 1), (2, 2)]), k


def _conv_kernel_ok(m) -> bool:
    p = m.params(_cv)
    return (p["dimension_numbers"].rhs_spec[0] == 0 and p["feature_group_count"] == 1
            and p["batch_group_count"] == 1)


CONCAT = [
    axiom("split-def", [_sp[0], _sp[1]],
          [slice_along(x, ax, 0, lambda m: m.params(_sp)["sizes"][0]),
           slice_along(x, ax, lambda m: m.params(_sp)["sizes"][0], lambda m: m.shape(x)[m[ax]])],
          lambda n: (lambda x: [v * 2 for v in jnp.split(x, [n % 2 + 1], n % 2)], [(3, 3)]),
          guards=[Guard("two-pieces", lambda m: len(m.params(_sp)["sizes"]) == 2)], cases=4),
    axiom("slice-concat-left", _sl, x,
          lambda n: (lambda x, y: _slice(_cat2(x, y, n % 2), n % 2, 0, x.shape[n % 2]),
                     _axis_cases(n)[0]), guards=[slice_covers(_sl, _cat, x, x, ax)], cases=4),
    axiom("slice-concat-right", _sl, y,
          lambda n: (lambda x, y: _slice(_cat2(x, y, n % 2), n % 2, x.shape[n % 2], None),
                     _axis_cases(n)[0]), guards=[slice_covers(_sl, _cat, x, y, ax)], cases=4),
    axiom("concat-slices", Pat("concatenate", _lo, _hi, dimension=ax), x,
          lambda n: (lambda x: _cat2(_slice(x, n % 2, 0, 1), _slice(x, n % 2, 1, None), n % 2)
                     * 2, [(3, 2)]), guards=[adjacent_halves(_lo, _hi, x, ax)], cases=4),
    axiom("unary-concat", Pat(f, _cat), concat(Pat(f, x), Pat(f, y), dim=ax),
          lambda n: (lambda x, y: jnp.tanh(_cat2(x, y, n % 2)), _axis_cases(n)[0]), cases=4),
    axiom("binary-concat", Pat(g, concat(a, b, dim=ax), concat(c, d, dim=ax)),
          concat(Pat(g, a, c), Pat(g, b, d), dim=ax),
          lambda n: (lambda a, b, c, d: _cat2(a, b, n % 2) * _cat2(c, d, n % 2),
                     _axis_cases(n)[0] * 2),
          guards=[Guard("same-shapes", lambda m: m.shape(a) == m.shape(c)
                        and m.shape(b) == m.shape(d))], cases=4),
    axiom("unary-slice", _fs, Pat(f, Pat("slice", x, like=_fs)),
          lambda n: (lambda x: jnp.exp(x)[n % 2:, : n % 2 + 1], [(3, 3)]), cases=4),
    axiom("binary-slice", _gs, Pat(g, Pat("slice", x, like=_gs), Pat("slice", y, like=_gs)),
          lambda n: (lambda x, y: (x - y)[: n % 2 + 1, 1:], [(3, 3)] * 2),
          guards=[Guard("same-shapes", lambda m: m.shape(x) == m.shape(y))], cases=4),
    axiom("concat-assoc", concat(concat(x, y, dim=ax), z, dim=ax),
          Pat("concatenate", x, y, z, dimension=ax),
          lambda n: (lambda x, y, z: _cat2(_cat2(x, y, n % 2), z, n % 2),
                     [(1, 1), (1, 1), (1, 1)] if n < 2 else [(2, 1), (1, 1), (1, 1)]), cases=3),
    axiom("concat-geometry", concat(concat(a, b, dim=0), concat(c, d, dim=0), dim=1),
          concat(concat(a, c, dim=1), concat(b, d, dim=1), dim=0),
          lambda n: (lambda a, b, c, d: _cat2(_cat2(a, b, 0), _cat2(c, d, 0), 1),
                     [(1, n % 2 + 1), (2, n % 2 + 1), (1, 1), (2, 1)]),
          guards=[Guard("rows-align", lambda m: m.shape(a)[0] == m.shape(c)[0]
                        and m.shape(b)[0] == m.shape(d)[0])]),
    axiom("dot-concat-rhs", _dr, concat(dot(x, a, like=_dr), dot(x, b, like=_dr), dim=1),
          lambda n: (lambda x, a, b: x @ _cat2(a, b, 1), [(2, n + 1), (n + 1, 1), (n + 1, 2)])),
    axiom("dot-concat-lhs", _dl, concat(dot(x, w, like=_dl), dot(y, w, like=_dl), dim=0),
          lambda n: (lambda x, y, w: _cat2(x, y, 0) @ w, [(1, n + 1), (2, n + 1), (n + 1, 2)])),
    axiom("dot-concat-contract", _dc, Pat("add", dot(x, a, like=_dc), dot(h, b, like=_dc)),
          lambda n: (lambda x, h, a, b: _cat2(x, h, 1) @ _cat2(a, b, 0),
                     [(2, n + 1), (2, 1), (n + 1, 2), (1, 2)])),
    axiom("conv-concat-kernel", _cv,
          concat(Pat("conv_general_dilated", x, a, like=_cv),
                 Pat("conv_general_dilated", x, b, like=_cv),
                 dim=Fn(lambda m: m.params(_cv)["dimension_numbers"].out_spec[1])),
          lambda n: (lambda x, a, b: _conv(x, _cat2(a, b, 0), n),
                     [(1, 2, 3, 3), (1, 2, 2, 2), (n % 2 + 1, 2, 2, 2)]),
          guards=[Guard("ungrouped-oihw", _conv_kernel_ok)]),
    # A definition (a dot is its two column halves side by side): the rule's own
    # statement, on small tensors.
    *[axiom(r.name, r.src, r.tgt, r.example, guards=r.guards) for r in CS.SPLIT],
]


# layout -----------------------------------------------------------------------------------------
perm = Sym("perm")
_t1 = L.t(x, Sym("p"))
_t2 = L.t(_t1, Sym("q"))
_red = Pat("reduce_sum", L.t(x, perm), axes=Sym("axes"))
_fl, _fr = Pat("dot_general", L.t(x, perm), w), Pat("dot_general", x, L.t(w, perm))
_dt = L.t(dot(x, w), (1, 0))
_ci = Pat("conv_general_dilated", L.t(x, perm), w)
_ck = Pat("conv_general_dilated", x, L.t(w, perm))
_co = L.t(Pat("conv_general_dilated", x, w), perm)
_PERMS = [(1, 0), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]    # no identity
_PAIRS = [(p, q) for r in (2, 3) for p in itertools.permutations(range(r))
          for q in itertools.permutations(range(r))]       # every pair of rank 2 and 3
_P4 = [(0, 2, 3, 1), (0, 3, 1, 2), (1, 0, 2, 3), (3, 2, 1, 0), (2, 3, 1, 0)]


def _shape(p):
    return (2, 3, 1) if len(p) == 3 else (2, 3)


LAYOUT = [
    axiom("transpose-compose", _t2, L.t(x, Fn(lambda m: L.compose(m.syms["p"], m.syms["q"]))),
          lambda n: (lambda x: _bind_t(_bind_t(x, _PAIRS[n][0]), _PAIRS[n][1]) * 2,
                     [_shape(_PAIRS[n][0])]), cases=len(_PAIRS)),
    axiom("transpose-id", L.t(x, perm), x,
          lambda n: (lambda x: lax.transpose_p.bind(x, permutation=(0, 1, 2)[:n + 2]) * 2,
                     [(2, 3, 1)[:n + 2]]),
          guards=[Guard("identity", lambda m: tuple(m[perm]) == tuple(range(len(m[perm]))))],
          cases=2),
    axiom("unary-transpose", Pat(f, L.t(x, perm)), L.t(Pat(f, x), perm),
          lambda n: (lambda x: jnp.sin(lax.transpose(x, _PERMS[n])), [_shape(_PERMS[n])]),
          cases=6),
    axiom("binary-transpose", Pat(g, L.t(x, perm), L.t(y, perm)), L.t(Pat(g, x, y), perm),
          lambda n: (lambda x, y: lax.transpose(x, _PERMS[n]) / lax.transpose(y, _PERMS[n]),
                     [_shape(_PERMS[n])] * 2),
          guards=[Guard("same-shapes", lambda m: m.shape(x) == m.shape(y))], cases=6),
    axiom("transpose-concat", concat(L.t(x, perm), L.t(y, perm), dim=ax),
          L.t(concat(x, y, dim=Fn(lambda m: m[perm][m[ax]])), perm),
          lambda n: (lambda x, y: jnp.concatenate([lax.transpose(x, _PERMS[1 + n % 5]),
                                                   lax.transpose(y, _PERMS[1 + n % 5])], n % 3),
                     [(1, 2, 1), (1, 2, 1)]), cases=6),
    axiom("transpose-slice", L._ts, L.t(Pat("slice", L.x, like=L._ts,
                                            start_indices=Fn(L.unpermuted("start_indices")),
                                            limit_indices=Fn(L.unpermuted("limit_indices")),
                                            strides=Fn(L.unpermuted("strides"))), L.perm),
          lambda n: (lambda x: _tslice(x, _PERMS[n], n), [(2, 3, 2)[:len(_PERMS[n])]]),
          cases=6),
    axiom("transpose-reduce", _red,
          L.t(Pat("reduce_sum", x, axes=Fn(L.reduce_axes), like=_red), Fn(L.reduce_perm)),
          lambda n: (lambda x: lax.transpose(x, _PERMS[1 + n % 5]).sum((n % 3,) if n < 5 else (0, 2)),
                     [(2, 3, 1)]), cases=6),
    axiom("dot-fold-lhs", _fl, Pat("dot_general", x, w, like=_fl, dimension_numbers=Fn(L.fold(_fl, 0))),
          lambda n: (lambda x, w: x.T @ w, [(3, n + 1), (3, 2)]), guards=[L.foldable(_fl, 0)]),
    axiom("dot-fold-rhs", _fr, Pat("dot_general", x, w, like=_fr, dimension_numbers=Fn(L.fold(_fr, 1))),
          lambda n: (lambda x, w: x @ w.T, [(n + 1, 2), (3, 2)]), guards=[L.foldable(_fr, 1)]),
    axiom("dot-transpose", _dt, dot(L.t(w, (1, 0)), L.t(x, (1, 0)), like=_dt.inputs[0]),
          lambda n: (lambda x, w: (x @ w).T, [(n + 1, 2), (2, 3)])),
    axiom("conv-fold-input", _ci,
          Pat("conv_general_dilated", x, w, like=_ci, dimension_numbers=L.respec(_ci, lhs=True)),
          lambda n: (lambda x, w: _conv4(lax.transpose(x, _P4[n]), w),
                     [_unpermute((1, 2, 3, 3), _P4[n]), (1, 2, 2, 2)]), cases=5),
    axiom("conv-fold-kernel", _ck,
          Pat("conv_general_dilated", x, w, like=_ck, dimension_numbers=L.respec(_ck, rhs=True)),
          lambda n: (lambda x, w: _conv4(x, lax.transpose(w, _P4[n])),
                     [(1, 2, 3, 3), _unpermute((1, 2, 2, 2), _P4[n])]), cases=5),
    axiom("conv-fold-output", _co,
          Pat("conv_general_dilated", x, w, like=_co.inputs[0],
              dimension_numbers=L.respec(_co.inputs[0], out=True)),
          lambda n: (lambda x, w: lax.transpose(_conv4(x, w), _P4[n]), [(1, 2, 3, 3), (2, 2, 2, 2)]),
          cases=5),
    # Statements of the sinking rules themselves (n-ary concat, pooling windows, a
    # scalar or broadcast operand), each checked elementwise on small tensors.
    *[axiom(f"transpose-concat-{k}", L.RULES[f"transpose-through-concat-{k}"].src,
            L.RULES[f"transpose-through-concat-{k}"].tgt,
            lambda n, k=k: (lambda *vs: jnp.concatenate([lax.transpose(v, _PERMS[1 + n % 5])
                                                         for v in vs], n % 3),
                            [(1, 2, 1)] * k))
      for k in range(3, L.MAX_CONCAT + 1)],
    axiom("transpose-window", L.RULES["transpose-through-window"].src,
          L.RULES["transpose-through-window"].tgt,
          lambda n: (lambda x: lax.reduce_window(
              lax.transpose(x, _P4[n % 5]), *[(-jnp.inf, lax.max), (0.0, lax.add),
                                              (jnp.inf, lax.min)][n % 3],
              (1, 1, 2, 2), (1, 1, 1, n % 2 + 1), ("SAME", "VALID")[n % 2]),
              [_unpermute((1, 2, 3, 3), _P4[n % 5])]), cases=6),
    *[axiom(name.replace("transpose-through-binary", "binary-transpose"),
            L.RULES[name].src, L.RULES[name].tgt,
            lambda n, name=name: (lambda x, y: _binary_with(name, n, x, y),
                                  [(3, 2, 2), () if "scalar" in name else (1, 3, 1)]),
            guards=L.RULES[name].guards, cases=3)
      for name in ("transpose-through-binary-scalar-lhs", "transpose-through-binary-scalar-rhs",
                   "transpose-through-binary-broadcast-lhs",
                   "transpose-through-binary-broadcast-rhs")],
    *[axiom(name.replace("transpose-to-nchw-through-binary", "binary-nchw-transpose"),
            L.RULES[name].src, L.RULES[name].tgt,
            lambda n, name=name: (lambda x, y: _binary_with(name, n, x, y, L.TO_NCHW),
                                  [(1, 2, 2, 3), (1, 3, 2, 2)]),
            guards=L.RULES[name].guards, cases=3)
      for name in ("transpose-to-nchw-through-binary-lhs",
                   "transpose-to-nchw-through-binary-rhs")],
]


def _binary_with(name, n, x, y, perm=(2, 0, 1)):
    """sub, div or mul of x transposed by `perm` and y (a scalar, a broadcast or a
    same-shape operand), on the side `name` says."""
    tx = lax.transpose(x, perm)
    op = (jnp.subtract, jnp.divide, jnp.multiply)[n % 3]
    return op(tx, y) if name.endswith("lhs") else op(y, tx)


# convolution ------------------------------------------------------------------------------------
_cx, _ca = Pat("conv_general_dilated", Pat("add", x, y), w), Pat("conv_general_dilated", x, Pat("add", a, b))
_cc = Pat("conv_general_dilated", concat(x, y, dim=1), concat(a, b, dim=1))
_zero_pad = Pat("pad", w, z)
_cp = Pat("conv_general_dilated", x, _zero_pad)


def _nchw_plain(pat) -> Guard:
    def test(m):
        p = m.params(pat)
        dn = p["dimension_numbers"]
        return (dn.lhs_spec[1] == 1 and dn.rhs_spec[:2] == (0, 1)
                and p["feature_group_count"] == 1 and p["batch_group_count"] == 1)
    return Guard("nchw-oihw-ungrouped", test)


def _channel_pad(m):
    """pad(w, 0) pads only the kernel's input-channel axis: (lo, hi), or None."""
    if not is_zero(m[z]):
        return None
    config = m.params(_zero_pad)["padding_config"]
    if any(tuple(c) != (0, 0, 0) for i, c in enumerate(config) if i != 1) or config[1][2]:
        return None
    return config[1][0], config[1][1]


CONVOLUTION = [
    axiom("conv-linear-input", _cx, Pat("add", Pat("conv_general_dilated", x, w, like=_cx),
                                        Pat("conv_general_dilated", y, w, like=_cx)),
          lambda n: (lambda x, y, w: _convn(x + y, w, n), [(1, 2, 3, 3)] * 2 + [(2, 2, 2, 2)])),
    axiom("conv-linear-kernel", _ca, Pat("add", Pat("conv_general_dilated", x, a, like=_ca),
                                         Pat("conv_general_dilated", x, b, like=_ca)),
          lambda n: (lambda x, a, b: _convn(x, a + b, n), [(1, 2, 3, 3)] + [(2, 2, 2, 2)] * 2)),
    axiom("conv-concat-input", _cc, Pat("add", Pat("conv_general_dilated", x, a, like=_cc),
                                        Pat("conv_general_dilated", y, b, like=_cc)),
          lambda n: (lambda x, y, a, b: _convn(_cat2(x, y, 1), _cat2(a, b, 1), n),
                     [(1, 1, 3, 3), (1, n % 2 + 1, 3, 3), (2, 1, 2, 2), (2, n % 2 + 1, 2, 2)]),
          guards=[_nchw_plain(_cc), Guard("channels-align", lambda m: m.shape(x)[1] == m.shape(a)[1])]),
    axiom("conv-pad-channels", _cp,
          Pat("conv_general_dilated", slice_along(x, 1, lambda m: _channel_pad(m)[0],
                                                  lambda m: m.shape(x)[1] - _channel_pad(m)[1]),
              w, like=_cp),
          lambda n: (lambda x, w: _convn(x, jnp.pad(w, ((0, 0), (n % 2, 1 - n % 2), (0, 0), (0, 0))), n),
                     [(1, 2, 3, 3), (2, 1, 2, 2)]),
          guards=[_nchw_plain(_cp), Guard("zero-channel-pad", lambda m: _channel_pad(m) is not None)]),
    # Definitions (a grouped conv is two half-convs, zero taps change nothing, a sum
    # pool is a depthwise conv with ones): the rules' own statements, on small tensors.
    *[axiom(f"conv-{C.RULES[name].name}", C.RULES[name].src, C.RULES[name].tgt, example,
            guards=C.RULES[name].guards)
      for name, example in [
          ("grouped-conv-halve", lambda n: (lambda x, w: lax.conv_general_dilated(
              x, w, (1, 1), ("VALID", "SAME", ((0, 1), (1, 0)))[n], feature_group_count=2),
              [(1, 2, 3, 3), (2, 1, 2, 2)])),
          ("enlarge-kernel", lambda n: (lambda x, w: _convn(x, w, n), [(1, 1, 3, 3), (1, 1, 1, 1)])),
          ("avgpool-as-conv", lambda n: (lambda x: lax.reduce_window(
              x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, n % 2 + 1, 1), ("VALID", "SAME", "VALID")[n]),
              [(1, 2, 3, 3)])),
          ("conv1x1-as-dot", lambda n: (C._nhwc1x1, [(n % 2 + 1, 2, 3, 2), (1, 1, 2, n + 1)])),
          ("strided-conv1x1-as-dot", lambda n: (lambda x, w: C._nhwc1x1(x, w, 2),
                                                [(1, 3, n + 1, 2), (1, 1, 2, 2)])),
          ("conv3x3-as-im2col", lambda n: (lambda x, w: lax.conv_general_dilated(
              x, w, (n % 2 + 1, 1), ("SAME", "VALID", ((0, 1), (1, 0)))[n],
              dimension_numbers=("NHWC", "HWIO", "NHWC")), [(1, 3, 3, 1), (3, 3, 1, 2)])),
          ("depthwise-conv3x3-as-taps", lambda n: (lambda x, w: lax.conv_general_dilated(
              x, w, (n % 2 + 1, 1), ("SAME", "VALID", ((0, 1), (1, 0)))[n],
              dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2),
              [(1, 3, 3, 2), (3, 3, 1, 2)]))]],
]


def _convn(x, w, n):
    return lax.conv_general_dilated(x, w, (1, 1), ("VALID", "SAME", ((1, 0), (0, 1)))[n % 3])


def _bind_t(x, p):
    """A transpose even when p is the identity (lax.transpose would skip it)."""
    return lax.transpose_p.bind(x, permutation=tuple(p))


def _tslice(x, p, n):
    """A slice (strided on odd n) of x transposed by p: off the first row, and every
    other element of the last axis."""
    y = lax.transpose(x, p)
    strides = None if n % 2 == 0 else (1,) * (y.ndim - 1) + (2,)
    return lax.slice(y, (1,) + (0,) * (y.ndim - 1), y.shape, strides)


def _unpermute(shape, p):
    """The shape whose transpose by p is `shape`."""
    out = [0] * len(p)
    for i, j in enumerate(p):
        out[j] = shape[i]
    return tuple(out)


def _conv4(x, w):
    """A VALID NCHW/OIHW conv."""
    return lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _cat2(x, y, axis):
    return jnp.concatenate([x, y], axis)


def _slice(x, axis, start, stop):
    return x[start:stop] if axis == 0 else x[:, start:stop]


def _conv(x, k, n):
    return lax.conv_general_dilated(x, k, (1, 1), ("SAME", "VALID", ((1, 0), (0, 1)))[n % 3])


# Slices narrowed (slices.py): the rules' own statements, checked on small tensors.
SLICES = [axiom(f"slices-{r.name}", r.src, r.tgt, r.example, guards=r.guards, cases=r.cases)
          for r in SL.RULES]

AXIOMS = RuleSet(ALGEBRA + CONCAT + LAYOUT + CONVOLUTION + SLICES)
