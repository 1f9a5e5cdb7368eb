"""Fusion: elementwise work moved next to the op XLA fuses it into. After two dots or
convs are merged, the activation and the bias of each half become one op on the merged
output (a single loop kernel, or the dot/conv epilogue on GPU); a bias that is a weight
concatenates for free once frozen."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from hlo_opt.rules.lang import Fn, Guard, Pat, Rule, RuleSet, Sym, tensors
from hlo_opt.rules.library.common import binary, concat, unary

x, y, c, d = tensors("x y c d")
ax = Sym("ax")
f, g = unary(), binary()
_sp = Pat("split", x, axis=ax)
_two = Guard("two-pieces", lambda m: len(m.params(_sp)["sizes"]) == 2)
_fx = Pat(f, x)
_gx = Pat(g, x, concat(c, d, dim=ax))
_u = Pat("split", _fx, axis=ax, sizes=Fn(lambda m: m.params(_sp)["sizes"]))
_b = Pat("split", _gx, axis=ax, sizes=Fn(lambda m: m.params(_sp)["sizes"]))
_s1 = Pat("slice", x)
_s2, _s3 = Pat("slice", x), Pat("slice", y)


def _split(x, axis):
    return jnp.split(x, [1 + axis], axis)


RULES = RuleSet([
    Rule("unary-before-split", "fusion", [Pat(f, _sp[0]), Pat(f, _sp[1])], [_u[0], _u[1]],
         guards=[_two], identity="f(split(x)) -> split(f(x))",
         example=lambda n: (lambda x: [jax.nn.relu(v) for v in _split(x, n % 2)],
                            [(3, n + 3)])),
    Rule("binary-before-split", "fusion", [Pat(g, _sp[0], c), Pat(g, _sp[1], d)],
         [_b[0], _b[1]],
         guards=[_two, Guard("pieces-fit", lambda m: m.shape(c) == m.shape(_sp[0])
                             and m.shape(d) == m.shape(_sp[1]))],
         identity="g(split(x), (c, d)) -> split(g(x, concat(c, d)))",
         example=lambda n: (lambda x, c, d: [v + b for v, b in zip(_split(x, 1), (c, d))],
                            [(n + 1, 5), (n + 1, 2), (n + 1, 3)])),
    Rule("unary-before-slice", "fusion", Pat(f, _s1), Pat("slice", Pat(f, x), like=_s1),
         identity="f(x[s]) -> f(x)[s]",
         example=lambda n: (lambda x: jnp.tanh(x[1:, : n + 1]), [(3, 4)])),
    Rule("binary-before-slice", "fusion", Pat(g, _s2, _s3),
         Pat("slice", Pat(g, x, y), like=_s2),
         guards=[Guard("same-slice", lambda m: m.params(_s2).key == m.params(_s3).key
                       and m.shape(x) == m.shape(y))],
         identity="g(x[s], y[s]) -> g(x, y)[s]",
         example=lambda n: (lambda x, y: x[: n + 1] * y[: n + 1], [(4, 2), (4, 2)])),
])
