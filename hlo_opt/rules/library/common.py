"""Shorthands the rule families share: op sets, plain-matmul patterns, guards."""
from __future__ import annotations

import numpy as np

from hlo_opt import ops
from hlo_opt.rules.lang import Fn, Guard, OpVar, Pat, Sym

PLAIN = (((1,), (0,)), ((), ()))          # x @ w on 2-D operands

UNARY = frozenset("neg exp log tanh logistic sin cos sqrt rsqrt abs square erf expm1 "
                  "log1p sign floor ceil relu".split())
BINARY = frozenset("add sub mul div max min pow".split())


def unary(name: str = "f") -> OpVar:
    return OpVar(name, UNARY)


def binary(name: str = "g") -> OpVar:
    return OpVar(name, BINARY)


def dot(x, w, **params) -> Pat:
    """A plain matmul in a source; in a target pass `like=` a source dot."""
    if "like" in params:
        return Pat("dot_general", x, w, dimension_numbers=PLAIN, **params)
    return Pat("dot_general", x, w, dimension_numbers=PLAIN)


def kn_weight(m, dot_pat, w) -> bool:
    """At `dot_pat` (a dot_general reading `w`): w is 2-D and contracted on its first
    axis (K x N, its columns the output's last axis), no batch axes."""
    (_, rc), (lb, _) = m.params(dot_pat)["dimension_numbers"]
    return len(m.shape(w)) == 2 and tuple(rc) == (0,) and not lb


def guard(name: str, test) -> Guard:
    return Guard(name, test)


def same_params(*pats: Pat) -> Guard:
    return Guard("same-params", lambda m: len({m.params(p).key for p in pats}) == 1)


def same_type(*vals) -> Guard:
    return Guard("same-type", lambda m: len({m.type(v) for v in vals}) == 1)


def unwidened(*pats: Pat) -> Guard:
    """Each matched dot or conv computes in its operands' type: no
    `preferred_element_type` wider than they are. The linearity rules move an add or a
    scale from one side of a dot to the other, so across a widening one they move it
    from one type into another: int8 weights summed before an int32 dot wrap where the
    two dots' int32 sum does not (`x @ a + x @ b`, every entry 100: 1,280,000, and
    -358,400 once factored), and bf16 ones round where the f32 sum would not. Within
    one type the identities hold exactly for integers (arithmetic modulo 2^n) and up to
    rounding for floats. The random arguments `verify` runs are small integers, too
    small to wrap, so the guard, not the check, keeps these rewrites out."""
    def test(m):
        return all(v.type.dtype == node.types[0].dtype
                   for node in map(m.node, pats) for v in node.inputs)
    return Guard("unwidened", test)


def scalar(v) -> Guard:
    return Guard("scalar", lambda m: m.shape(v) == ())


def rank(v, r: int) -> Guard:
    return Guard(f"rank-{r}", lambda m: len(m.shape(v)) == r)


def shape_of(v, axis=None) -> Fn:
    return Fn(lambda m: m.shape(v) if axis is None else m.shape(v)[axis])


def concat(*xs, dim) -> Pat:
    return Pat("concatenate", *xs, dimension=dim)


def split2(v, axis, first, second) -> Pat:
    """A two-way split of `v` along `axis` (an int or a Sym/Fn); `first`/`second` are
    tensors whose extent along that axis are the sizes."""
    def sizes(m):
        ax = _axis(m, axis)
        return (m.shape(first)[ax], m.shape(second)[ax])
    return Pat("split", v, axis=axis, sizes=Fn(sizes))


def _axis(m, axis):
    return m[axis] if isinstance(axis, Sym) else axis.fn(m) if isinstance(axis, Fn) else axis


def slice_along(v, axis, start, stop) -> Pat:
    """`v[start:stop]` along `axis`, `v` bound by the source; axis an int or Sym,
    start and stop ints or functions of the match."""
    def bounds(m, lo):
        ax, q = _axis(m, axis), start if lo else stop
        at = q(m) if callable(q) else q
        return tuple(at if i == ax else (0 if lo else n) for i, n in enumerate(m.shape(v)))
    return Pat("slice", v, start_indices=Fn(lambda m: bounds(m, True)),
               limit_indices=Fn(lambda m: bounds(m, False)), strides=None)


def is_slice_of(m, sl, whole, axis: int, start: int, stop: int) -> bool:
    """Slice node `sl` of `whole` takes [start, stop) along `axis` and all of every
    other axis, with unit strides."""
    p = m.params(sl)
    shape = m.shape(whole)
    want_lo = tuple(start if i == axis else 0 for i in range(len(shape)))
    want_hi = tuple(stop if i == axis else n for i, n in enumerate(shape))
    strides = p["strides"]
    return (tuple(p["start_indices"]) == want_lo and tuple(p["limit_indices"]) == want_hi
            and (strides is None or all(s == 1 for s in strides)))


def is_zero(value) -> bool:
    """`value` is a constant zero (perhaps converted), as jnp.pad's padding value is."""
    node = value.node
    while node.op == "convert_element_type":
        node = node.inputs[0].node
    return node.op == "const" and not np.any(np.asarray(ops.const_value(node)))


def conv_axes(m, conv) -> tuple[int, int, int, int]:
    """(input feature axis, kernel out axis, kernel in axis, output feature axis)."""
    dn = m.params(conv)["dimension_numbers"]
    return dn.lhs_spec[1], dn.rhs_spec[0], dn.rhs_spec[1], dn.out_spec[1]


def slice_covers(sl, cat, x, which, ax) -> Guard:
    """Slice `sl` of `cat = concat(x, y)` along `ax` takes exactly the operand `which`."""
    def test(m):
        k = m[ax]
        lo = 0 if which is x else m.shape(x)[k]
        return is_slice_of(m, sl, cat, k, lo, lo + m.shape(which)[k])
    return Guard(f"slice-is-{which.name}", test)


def adjacent_halves(lo, hi, x, ax) -> Guard:
    """Slices `lo` and `hi` of `x` along `ax` are x[:k] and x[k:]."""
    def test(m):
        k = m[ax]
        cut = m.shape(lo)[k]
        return is_slice_of(m, lo, x, k, 0, cut) and is_slice_of(m, hi, x, k, cut, m.shape(x)[k])
    return Guard("adjacent-halves", test)
