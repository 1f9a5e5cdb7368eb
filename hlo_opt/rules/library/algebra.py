"""Algebra: add/mul associativity, commutativity, distributivity and factoring;
negation; matmul associativity and linearity; scalar factors moved across matmuls
(onto the weight, where a frozen weight pays for it once)."""
from __future__ import annotations

from hlo_opt.rules.lang import Pat, Rule, RuleSet, tensors
from hlo_opt.rules.library.common import dot, rank, same_params, scalar, unwidened

x, y, z, a, b, s, w = tensors("x y z a b s w")


def add(p, q):
    return Pat("add", p, q)


def mul(p, q):
    return Pat("mul", p, q)


def _mat(n):
    return [(n + 1, n + 2), (n + 2, 3), (n + 2, 3)]


_d1, _d2 = dot(x, a), dot(x, b)
_e1, _e2 = dot(x, a), dot(y, a)
_inner = dot(x, a)
_outer = dot(_inner, b)
_right = dot(a, b)
_outer_right = dot(x, _right)
_lhs_sum, _rhs_sum = dot(add(x, y), a), dot(x, add(a, b))
_sx, _sw, _sdot = dot(mul(s, x), w), dot(x, mul(s, w)), dot(x, w)

RULES = RuleSet([
    Rule("add-commute", "algebra", add(x, y), add(y, x), identity="x+y -> y+x",
         example=lambda n: (lambda x, y: x + y, [(n + 1, 3)] * 2)),
    Rule("add-assoc", "algebra", add(add(x, y), z), add(x, add(y, z)),
         identity="(x+y)+z -> x+(y+z)",
         example=lambda n: (lambda x, y, z: (x + y) + z, [(n + 2,)] * 3)),
    Rule("add-assoc-rev", "algebra", add(x, add(y, z)), add(add(x, y), z),
         identity="x+(y+z) -> (x+y)+z",
         example=lambda n: (lambda x, y, z: x + (y + z), [(2, n + 1)] * 3)),
    Rule("mul-commute", "algebra", mul(x, y), mul(y, x), identity="x*y -> y*x",
         example=lambda n: (lambda x, y: x * y, [(n + 1, 2)] * 2)),
    Rule("mul-assoc", "algebra", mul(mul(x, y), z), mul(x, mul(y, z)),
         identity="(x*y)*z -> x*(y*z)",
         example=lambda n: (lambda x, y, z: (x * y) * z, [(n + 3,)] * 3)),
    Rule("mul-assoc-rev", "algebra", mul(x, mul(y, z)), mul(mul(x, y), z),
         identity="x*(y*z) -> (x*y)*z",
         example=lambda n: (lambda x, y, z: x * (y * z), [(n + 1, 2)] * 3)),
    Rule("mul-distribute", "algebra", mul(x, add(y, z)), add(mul(x, y), mul(x, z)),
         identity="x*(y+z) -> x*y + x*z",
         example=lambda n: (lambda x, y, z: x * (y + z), [(n + 2,)] * 3)),
    Rule("mul-factor", "algebra", add(mul(x, y), mul(x, z)), mul(x, add(y, z)),
         identity="x*y + x*z -> x*(y+z)",
         example=lambda n: (lambda x, y, z: x * y + x * z, [(n + 1, 3)] * 3)),
    Rule("sub-as-add-neg", "algebra", Pat("sub", x, y), add(x, Pat("neg", y)),
         identity="x-y -> x+(-y)",
         example=lambda n: (lambda x, y: x - y, [(n + 2,)] * 2)),
    Rule("add-neg-as-sub", "algebra", add(x, Pat("neg", y)), Pat("sub", x, y),
         identity="x+(-y) -> x-y",
         example=lambda n: (lambda x, y: x + (-y), [(n + 2,)] * 2)),
    Rule("neg-neg", "algebra", Pat("neg", Pat("neg", x)), x, identity="-(-x) -> x",
         example=lambda n: (lambda x: -(-x) * 2, [(n + 1, 2)])),
    Rule("dot-assoc", "algebra", _outer, dot(x, dot(a, b, like=_inner), like=_outer),
         guards=[same_params(_inner, _outer), unwidened(_inner)], identity="(x@a)@b -> x@(a@b)",
         example=lambda n: (lambda x, a, b: (x @ a) @ b, [(n + 1, 4), (4, 3), (3, 2)])),
    Rule("dot-assoc-rev", "algebra", _outer_right,
         dot(dot(x, a, like=_right), b, like=_right),
         guards=[same_params(_right, _outer_right), unwidened(_right)],
         identity="x@(a@b) -> (x@a)@b",
         example=lambda n: (lambda x, a, b: x @ (a @ b), [(n + 1, 4), (4, 3), (3, 2)])),
    Rule("dot-distribute-rhs", "algebra", _rhs_sum,
         add(dot(x, a, like=_rhs_sum), dot(x, b, like=_rhs_sum)), guards=[unwidened(_rhs_sum)],
         identity="x@(a+b) -> x@a + x@b",
         example=lambda n: (lambda x, a, b: x @ (a + b), _mat(n))),
    Rule("dot-factor-rhs", "algebra", add(_d1, _d2), dot(x, add(a, b), like=_d1),
         guards=[same_params(_d1, _d2), unwidened(_d1, _d2)], identity="x@a + x@b -> x@(a+b)",
         example=lambda n: (lambda x, a, b: x @ a + x @ b, _mat(n))),
    Rule("dot-distribute-lhs", "algebra", _lhs_sum,
         add(dot(x, a, like=_lhs_sum), dot(y, a, like=_lhs_sum)), guards=[unwidened(_lhs_sum)],
         identity="(x+y)@a -> x@a + y@a",
         example=lambda n: (lambda x, y, a: (x + y) @ a, [(n + 1, 3)] * 2 + [(3, 2)])),
    Rule("dot-factor-lhs", "algebra", add(_e1, _e2), dot(add(x, y), a, like=_e1),
         guards=[same_params(_e1, _e2), unwidened(_e1, _e2)], identity="x@a + y@a -> (x+y)@a",
         example=lambda n: (lambda x, y, a: x @ a + y @ a, [(n + 1, 3)] * 2 + [(3, 2)])),
    Rule("scalar-out-of-dot-lhs", "algebra", _sx, mul(s, dot(x, w, like=_sx)),
         guards=[scalar(s), rank(x, 2), unwidened(_sx)], identity="(s*x)@w -> s*(x@w)",
         example=lambda n: (lambda s, x, w: (s * x) @ w, [(), (n + 1, 3), (3, 2)])),
    Rule("scalar-out-of-dot-rhs", "algebra", _sw, mul(s, dot(x, w, like=_sw)),
         guards=[scalar(s), rank(w, 2), unwidened(_sw)], identity="x@(s*w) -> s*(x@w)",
         example=lambda n: (lambda s, x, w: x @ (s * w), [(), (n + 1, 3), (3, 2)])),
    Rule("scalar-onto-weight", "algebra", mul(s, _sdot), dot(x, mul(s, w), like=_sdot),
         guards=[scalar(s), unwidened(_sdot)], identity="s*(x@w) -> x@(s*w)",
         example=lambda n: (lambda s, x, w: s * (x @ w), [(), (n + 1, 3), (3, 2)])),
])
