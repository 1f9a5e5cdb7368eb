"""Layout: transposes fused and cancelled, moved through elementwise ops, reductions
and concats, folded into (and out of) `dot_general` and conv dimension numbers; convs
between NCHW/OIHW and NHWC/HWIO. A transpose that lands on a weight costs nothing once
the weight is frozen, so pushing transposes onto weights is how layout changes pay."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.lax import ConvDimensionNumbers

from hlo_opt.rules.lang import Fn, Guard, OpVar, Pat, Rule, RuleSet, Sym, tensors
from hlo_opt.rules.library.common import PLAIN, binary, concat, dot, kn_weight, rank, unary

x, y, w = tensors("x y w")
perm, ax = Sym("perm"), Sym("ax")
f, g = unary(), binary()
NCHW = ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
NHWC = ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
TO_NHWC, TO_NCHW, TO_HWIO = (0, 2, 3, 1), (0, 3, 1, 2), (2, 3, 1, 0)


def t(v, p, **params) -> Pat:
    return Pat("transpose", v, permutation=p, **params)


def compose(p, q) -> tuple[int, ...]:
    """The permutation of transpose(transpose(x, p), q)."""
    return tuple(p[i] for i in q)


def inverse(p) -> tuple[int, ...]:
    out = [0] * len(p)
    for i, j in enumerate(p):
        out[j] = i
    return tuple(out)


def _perm(pat) -> Fn:
    return Fn(lambda m: m.params(pat)["permutation"])


# transposes alone and through elementwise ops ---------------------------------------------------
_t1 = t(x, Sym("p"))
_t2 = t(_t1, Sym("q"))
def _tt(m):
    return compose(m.syms["p"], m.syms["q"])


_id = Guard("identity", lambda m: tuple(m[perm]) == tuple(range(len(m[perm]))))
_tf = t(Pat(f, x), perm)
_tg = t(Pat(g, x, y), perm)


_ts = Pat("slice", t(x, perm))


def unpermuted(key, at=_ts):
    """op(t(x, perm)) at `at` (a slice by default): its `key` param (per axis of t(x))
    per axis of x."""
    def value(m):
        per_axis = m.params(at)[key]
        if per_axis is None:
            return None
        out = [0] * len(per_axis)
        for i, j in enumerate(m[perm]):
            out[j] = per_axis[i]
        return tuple(out)
    return value


def _moved(v, axis_sym, p) -> Fn:
    return Fn(lambda m: m[p][m[axis_sym]])


BASIC = [
    Rule("transpose-fuse", "layout", _t2, t(x, Fn(_tt)), identity="t(t(x,p),q) -> t(x,p.q)",
         example=lambda n: (lambda x: jnp.transpose(jnp.transpose(x, (1, 2, 0)), _perm3(n)),
                            [(2, 3, n + 1)])),
    Rule("transpose-identity", "layout", t(x, perm), x, guards=[_id],
         identity="t(x,id) -> x",
         example=lambda n: (lambda x: lax.transpose_p.bind(x, permutation=tuple(range(n + 1)))
                            * 2, [(2,) * (n + 1)])),
    Rule("transpose-cancel", "layout", _t2, x,
         guards=[Guard("inverse", lambda m: _tt(m) == tuple(range(len(_tt(m)))))],
         identity="t(t(x,p),inverse(p)) -> x",
         example=lambda n: (lambda x: jnp.transpose(jnp.transpose(x, _perm3(n)),
                                                    inverse(_perm3(n))) * 2, [(2, 3, 4)])),
    Rule("transpose-through-unary", "layout", Pat(f, t(x, perm)), t(Pat(f, x), perm),
         identity="f(t(x)) -> t(f(x))",
         example=lambda n: (lambda x: _unary(n)(x.T), [(n + 1, 3)])),
    Rule("unary-through-transpose", "layout", _tf, Pat(f, t(x, perm)),
         identity="t(f(x)) -> f(t(x))",
         example=lambda n: (lambda x: _unary(n)(x).T, [(n + 1, 3)])),
    Rule("transpose-through-binary", "layout", Pat(g, t(x, perm), t(y, perm)),
         t(Pat(g, x, y), perm), guards=[Guard("same-shapes", lambda m: m.shape(x) == m.shape(y))],
         identity="g(t(x), t(y)) -> t(g(x,y))",
         example=lambda n: (lambda x, y: _binary(n)(x.T, y.T), [(n + 1, 2)] * 2)),
    Rule("binary-through-transpose", "layout", _tg, Pat(g, t(x, perm), t(y, perm)),
         guards=[Guard("same-shapes", lambda m: m.shape(x) == m.shape(y))],
         identity="t(g(x,y)) -> g(t(x), t(y))",
         example=lambda n: (lambda x, y: _binary(n)(x, y).T, [(n + 1, 2)] * 2)),
    Rule("transpose-through-slice", "layout", _ts, t(Pat("slice", x, like=_ts,
                                                      start_indices=Fn(unpermuted("start_indices")),
                                                      limit_indices=Fn(unpermuted("limit_indices")),
                                                      strides=Fn(unpermuted("strides"))), perm),
         identity="t(x)[s] -> t(x[s'])",
         example=lambda n: (lambda x: jnp.transpose(x, _perm3(n))[1:, : n + 1], [(3, 4, 2)])),
    Rule("transpose-through-concat", "layout", concat(t(x, perm), t(y, perm), dim=ax),
         t(concat(x, y, dim=_moved(x, ax, perm)), perm),
         identity="concat(t(x), t(y)) -> t(concat(x, y))",
         example=lambda n: (lambda x, y: jnp.concatenate([x.T, y.T], n % 2),
                            [(2, 3), (2, 3)] if n % 2 else [(3, 2), (3, n + 1)])),
]

MAX_CONCAT = 8           # Inception and NASNet concatenate up to 6 branches


def concat_rule(k: int) -> Rule:
    """concat(t(x1), ..., t(xk)) -> t(concat(x1, ..., xk)) for k operands."""
    xs = tensors(" ".join(f"x{i}" for i in range(k)))
    return Rule(f"transpose-through-concat-{k}", "layout",
                Pat("concatenate", *[t(v, perm) for v in xs], dimension=ax),
                t(Pat("concatenate", *xs, dimension=_moved(xs[0], ax, perm)), perm),
                identity=f"concat(t(x1), .., t(x{k})) -> t(concat(x1, .., x{k}))",
                example=lambda n: (lambda *vs: jnp.concatenate([jnp.transpose(v, _perm3(n))
                                                                for v in vs], n % 3),
                                   [(2, 3, 4)] * k))


BASIC += [concat_rule(k) for k in range(3, MAX_CONCAT + 1)]

# pooling windows and broadcast operands ---------------------------------------------------------
POOL = OpVar("pool", frozenset({"reduce_window_sum", "reduce_window_max", "reduce_window_min"}))
WINDOW_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation",
                 "window_dilation")
_pool = Pat(POOL, t(x, perm))


def _pool_fn(n):
    """Max, sum or min pooling on 4-D x transposed by NHWC->NCHW, stride n % 2 + 1."""
    op, init = [(lax.max, -jnp.inf), (lax.add, 0.0), (lax.min, jnp.inf)][n % 3]
    return lambda x: lax.reduce_window(jnp.transpose(x, TO_NCHW), init, op, (1, 1, 3, 2),
                                       (1, 1, n % 2 + 1, 1), ("SAME", "VALID")[n % 2])


def smaller(v, than) -> Guard:
    """`v` broadcasts into `than` (a scalar, or the same rank with fewer elements)."""
    def test(m):
        small, big = m.shape(v), m.shape(than)
        return small == () or (len(small) == len(big) and small != big
                               and all(s in (1, b) for s, b in zip(small, big)))
    return Guard("broadcast-operand", test)


def _past_binary(name: str, side: int, scalar: bool, guards, x_perm, shapes) -> Rule:
    """g(t(x), y) -> t(g(x, y')), y' = y (`scalar`) or y transposed back; `side` is
    t(x)'s operand position; `guards(tx)` the rule's guards on the pattern t(x); the
    example transposes its x by `x_perm`."""
    tx = t(x, perm)
    src = Pat(g, tx, y) if side == 0 else Pat(g, y, tx)
    back = y if scalar else t(y, Fn(lambda m: inverse(m[perm])))
    tgt = t(Pat(g, x, back) if side == 0 else Pat(g, back, x), perm)
    order = (lambda x, y: (x, y)) if side == 0 else (lambda x, y: (y, x))
    return Rule(f"{name}-{'lhs' if side == 0 else 'rhs'}", "layout", src, tgt,
                guards=guards(tx),
                identity="g(t(x), y) -> t(g(x, " + ("y))" if scalar else "t'(y)))"),
                example=lambda n: (lambda x, y: _binary(n)(*order(jnp.transpose(x, x_perm),
                                                                  y * (1 + n))),
                                   shapes))


def _bcast_rule(side: int, scalar: bool) -> Rule:
    """g(t(x), y) -> t(g(x, y')) with y a scalar (y' = y) or a smaller same-rank tensor
    broadcast into t(x) (y' = y transposed back)."""
    return _past_binary(
        f"transpose-through-binary-{'scalar' if scalar else 'broadcast'}", side, scalar,
        lambda tx: [smaller(y, tx), Guard("scalar" if scalar else "same-rank",
                                          lambda m: (m.shape(y) == ()) == scalar)],
        (2, 0, 1), [(3, 4, 2), ()] if scalar else [(3, 4, 2), (1, 1, 4)])


def _untransposed(m) -> bool:
    node = m[y].node
    return node.op != "transpose" or tuple(node.params["permutation"]) != TO_NCHW


def _nchw_rule(side: int) -> Rule:
    """g(t(x, NHWC->NCHW), y) -> t(g(x, t'(y)), NHWC->NCHW) with y of t(x)'s shape and not
    itself so transposed (then `transpose-through-binary` takes both): the transpose a
    conv put in NHWC leaves behind passes a binary op before the other operand carries
    one. Sinking a ResNet's residual stream waited for that, one block per round of
    `search.layout.saturate` (34 rounds at 32 blocks, the time growing with the square
    of the depth). Only that permutation, so it cannot undo itself on the other operand
    (it adds an NCHW->NHWC transpose there); a move of the layout move alone
    (`search.MOVE_ONLY`)."""
    return _past_binary(
        "transpose-to-nchw-through-binary", side, False,
        lambda tx: [Guard("to-nchw", lambda m: tuple(m[perm]) == TO_NCHW),
                    Guard("same-shapes", lambda m: m.shape(y) == m.shape(tx)),
                    Guard("other-untransposed", _untransposed)],
        TO_NCHW, [(1, 2, 3, 4), (1, 4, 2, 3)])


SINK = [
    Rule("transpose-through-window", "layout", _pool,
         t(Pat(POOL, x, **{k: Fn(unpermuted(k, _pool)) for k in WINDOW_PARAMS}), perm),
         identity="pool(t(x)) -> t(pool(x)) (window per axis renamed)",
         example=lambda n: (_pool_fn(n), [(1, 5, 4, 2)])),
    *[_bcast_rule(side, scalar) for side in (0, 1) for scalar in (True, False)],
    *[_nchw_rule(side) for side in (0, 1)],
]


def _perm3(n):
    return [(1, 0, 2), (2, 1, 0), (0, 2, 1)][n % 3]


def _unary(n):
    return (jnp.tanh, jax.nn.relu, jnp.exp)[n % 3]


def _binary(n):
    return (jnp.add, jnp.multiply, jnp.subtract)[n % 3]


# reductions -------------------------------------------------------------------------------------
_red = Pat("reduce_sum", t(x, perm), axes=Sym("axes"))


def reduce_axes(m):
    """sum(t(x, perm), axes): the axes of x summed."""
    return tuple(sorted(m[perm][i] for i in m.syms["axes"]))


def reduce_perm(m):
    """sum(t(x, perm), axes): the transpose taking sum(x, reduce_axes) to it."""
    p, axes = m[perm], set(m.syms["axes"])
    kept = [p[i] for i in range(len(p)) if i not in axes]
    order = sorted(kept)
    return tuple(order.index(k) for k in kept)


REDUCE = [
    Rule("transpose-through-reduce", "layout", _red,
         t(Pat("reduce_sum", x, axes=Fn(reduce_axes), like=_red), Fn(reduce_perm)),
         identity="sum(t(x), A) -> t(sum(x, p[A]))",
         example=lambda n: (lambda x: jnp.transpose(x, _perm3(n)).sum(n % 3),
                            [(2, 3, 4)])),
]


# dot_general ------------------------------------------------------------------------------------
_dl = Pat("dot_general", t(x, perm), w)
_dr = Pat("dot_general", x, t(w, perm))


def fold(pat, side):
    """dot_general(.., t(operand, perm), ..) at `pat`: the dimension_numbers reading the
    untransposed operand (side 0: lhs, 1: rhs); None when the operand's free dims would
    come out in another order (then the rule does not apply)."""
    def dn(m):
        (lc, rc), (lb, rb) = m.params(pat)["dimension_numbers"]
        p = m[perm]
        c, b = (lc, lb) if side == 0 else (rc, rb)
        free = [p[i] for i in range(len(p)) if i not in c and i not in b]
        if free != sorted(free):
            return None
        c, b = tuple(p[i] for i in c), tuple(p[i] for i in b)
        return ((c, rc), (b, rb)) if side == 0 else ((lc, c), (lb, b))
    return dn


def foldable(pat, side) -> Guard:
    return Guard("free-dims-keep-order", lambda m: fold(pat, side)(m) is not None)


_tw = dot(x, t(w, (1, 0)))
_dt = t(dot(x, w), (1, 0))
_contract_first = Pat("dot_general", x, w, dimension_numbers=(((0,), (0,)), ((), ())))

_kn = Pat("dot_general", x, w)


def _on_nk(m):
    (lc, _), _ = m.params(_kn)["dimension_numbers"]
    return ((tuple(lc), (1,)), ((), ()))


DOT = [
    # XLA's CPU backend reads an N x K weight faster than a K x N one: BERT's 64x1024 @
    # 1024x1024 dot 0.605 -> 0.562 ms, @ 1024x4096 2.352 -> 2.072 ms (2-core VM,
    # interleaved, median of 9). The transpose of a frozen weight is computed once.
    Rule("dot-weight-to-nk", "layout", _kn,
         Pat("dot_general", x, t(w, (1, 0)), like=_kn, dimension_numbers=Fn(_on_nk)),
         guards=[Guard("kn-weight", lambda m: kn_weight(m, _kn, w))],
         identity="x @ w -> dot(x, t(w)) on t(w)'s second axis: free once w is frozen",
         example=lambda n: (lambda x, w: jnp.tanh(x @ w),
                            [((2, 3), (1, 2, 3))[n % 2], (3, n + 1)])),
    Rule("dot-fold-lhs-transpose", "layout", _dl,
         Pat("dot_general", x, w, like=_dl, dimension_numbers=Fn(fold(_dl, 0))),
         guards=[foldable(_dl, 0)], identity="dot(t(x), w) -> dot_general(x, w) (dims renamed)",
         example=lambda n: (lambda x, w: x.T @ w, [(3, n + 1), (3, 2)])),
    Rule("dot-fold-rhs-transpose", "layout", _dr,
         Pat("dot_general", x, w, like=_dr, dimension_numbers=Fn(fold(_dr, 1))),
         guards=[foldable(_dr, 1)], identity="dot(x, t(w)) -> dot_general(x, w) (dims renamed)",
         example=lambda n: (lambda x, w: x @ w.T, [(n + 1, 3), (2, 3)])),
    Rule("dot-unfold-lhs", "layout", _contract_first,
         Pat("dot_general", t(x, (1, 0)), w, like=_contract_first, dimension_numbers=PLAIN),
         guards=[rank(x, 2), rank(w, 2)], identity="dot_general(x, w, 0x0) -> t(x) @ w",
         example=lambda n: (lambda x, w: lax.dot_general(x, w, (((0,), (0,)), ((), ()))),
                            [(3, n + 1), (3, 2)])),
    Rule("dot-transpose", "layout", _dt,
         dot(t(w, (1, 0)), t(x, (1, 0)), like=_dt.inputs[0]),
         guards=[rank(x, 2), rank(w, 2)], identity="t(x@w) -> t(w)@t(x)",
         example=lambda n: (lambda x, w: (x @ w).T, [(n + 1, 3), (3, 2)])),
]


# convolution ------------------------------------------------------------------------------------
_cin = Pat("conv_general_dilated", t(x, perm), w)
_ck = Pat("conv_general_dilated", x, t(w, perm))
_cout = t(Pat("conv_general_dilated", x, w), perm)
_c_nchw = Pat("conv_general_dilated", x, w, dimension_numbers=NCHW)
_c_oihw = Pat("conv_general_dilated", x, w)
_c_nhwc = Pat("conv_general_dilated", x, w, dimension_numbers=NHWC)


def respec(pat, lhs=False, rhs=False, out=False) -> Fn:
    """The conv at `pat` with a transpose (by `perm`) folded into its lhs, rhs or out
    spec."""
    return Fn(lambda m: _respec(m.params(pat)["dimension_numbers"], m[perm], lhs, rhs, out))


def _respec(dn, p, lhs, rhs, out):
    return ConvDimensionNumbers(
        tuple(p[i] for i in dn.lhs_spec) if lhs else dn.lhs_spec,
        tuple(p[i] for i in dn.rhs_spec) if rhs else dn.rhs_spec,
        tuple(inverse(p)[i] for i in dn.out_spec) if out else dn.out_spec)


def _conv(x, w, layout, stride=1):
    spec = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}[layout]
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=spec)


CONV = [
    Rule("conv-fold-input-transpose", "layout", _cin,
         Pat("conv_general_dilated", x, w, like=_cin, dimension_numbers=respec(_cin, lhs=True)),
         identity="conv(t(x), w) -> conv(x, w) (lhs spec renamed)",
         example=lambda n: (lambda x, w: _conv(x.transpose(0, 3, 1, 2), w, "NCHW"),
                            [(1, n + 3, 4, 2), (3, 2, 3, 3)])),
    Rule("conv-fold-kernel-transpose", "layout", _ck,
         Pat("conv_general_dilated", x, w, like=_ck, dimension_numbers=respec(_ck, rhs=True)),
         identity="conv(x, t(w)) -> conv(x, w) (rhs spec renamed)",
         example=lambda n: (lambda x, w: _conv(x, w.transpose(3, 2, 0, 1), "NCHW"),
                            [(1, 2, n + 3, 4), (3, 3, 2, 3)])),
    Rule("conv-fold-output-transpose", "layout", _cout,
         Pat("conv_general_dilated", x, w, like=_cout.inputs[0],
             dimension_numbers=respec(_cout.inputs[0], out=True)),
         identity="t(conv(x, w)) -> conv(x, w) (out spec renamed)",
         example=lambda n: (lambda x, w: _conv(x, w, "NCHW").transpose(0, 2, 3, 1),
                            [(1, 2, n + 3, 4), (3, 2, 3, 3)])),
    Rule("conv-to-nhwc", "layout", _c_nchw,
         t(Pat("conv_general_dilated", t(x, TO_NHWC), t(w, TO_HWIO), like=_c_nchw,
               dimension_numbers=NHWC), TO_NCHW),
         identity="conv_NCHW(x, w) -> t(conv_NHWC(t(x), t(w)))",
         example=lambda n: (lambda x, w: _conv(x, w, "NCHW", n % 2 + 1),
                            [(1, 2, n + 3, 4), (3, 2, 3, 3)])),
    Rule("conv-kernel-to-hwio", "layout", _c_oihw,
         Pat("conv_general_dilated", x, t(w, TO_HWIO), like=_c_oihw,
             dimension_numbers=Fn(lambda m: m.params(_c_oihw)["dimension_numbers"]
                                  ._replace(rhs_spec=NHWC.rhs_spec))),
         guards=[Guard("oihw-kernel", lambda m: m.params(_c_oihw)["dimension_numbers"].rhs_spec
                       == NCHW.rhs_spec)],
         identity="conv(x, w_OIHW) -> conv(x, t(w) as HWIO): free once w is frozen",
         example=lambda n: (lambda x, w: _conv(x, w, "NCHW", n % 2 + 1),
                            [(1, 2, n + 3, 4), (3, 2, 3, 3)])),
    Rule("conv-to-nchw", "layout", _c_nhwc,
         t(Pat("conv_general_dilated", t(x, TO_NCHW), t(w, (3, 2, 0, 1)), like=_c_nhwc,
               dimension_numbers=NCHW), TO_NHWC),
         identity="conv_NHWC(x, w) -> t(conv_NCHW(t(x), t(w)))",
         example=lambda n: (lambda x, w: _conv(x, w, "NHWC", n % 2 + 1),
                            [(1, n + 3, 4, 2), (3, 3, 2, 3)])),
]

RULES = RuleSet(BASIC + SINK + REDUCE + DOT + CONV)
