"""Elementwise ops: unary, binary, compare, select, clamp, casts.

Each line pairs a lax primitive with its NumPy reference.  Shapes are equal (lax does
no implicit broadcasting), so every reference is a plain ufunc call.
"""
from __future__ import annotations

import math

import numpy as np
from jax import lax
from jax._src import ad_util

from hlo_opt.ops.table import ELEMENTWISE, primitive_op

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _int_div(a, b):
    if np.issubdtype(a.dtype, np.integer):   # lax.div rounds toward zero
        q = np.abs(a) // np.maximum(np.abs(b), 1)
        return np.where((a < 0) != (b < 0), -q, q)
    return a / b


def _round(p, x):
    if int(p["rounding_method"]) == int(lax.RoundingMethod.TO_NEAREST_EVEN):
        return np.round(x)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _not(x):
    return np.logical_not(x) if x.dtype == bool else np.invert(x)


def _select_n(pred, *cases):
    return np.choose(pred.astype(np.int64), cases)


UNARY = {                                             # op -> reference
    "neg": np.negative, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log1p": np.log1p, "expm1": np.expm1, "tanh": np.tanh,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt, "abs": np.abs, "sign": np.sign, "floor": np.floor,
    "ceil": np.ceil, "is_finite": np.isfinite, "erf": _erf, "erfc": _erfc,
    "square": np.square, "not": _not, "stop_gradient": lambda x: x,
    "copy": lambda x: x,
}

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _int_div,
    "rem": np.fmod, "pow": np.power, "max": np.maximum, "min": np.minimum,
    "atan2": np.arctan2, "nextafter": np.nextafter, "and": np.bitwise_and,
    "or": np.bitwise_or, "xor": np.bitwise_xor, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "shift_left": np.left_shift, "shift_right_arithmetic": np.right_shift,
}

for _name, _fn in {**UNARY, **BINARY}.items():
    _prim = getattr(lax, f"{_name}_p", None)
    if _prim is not None:
        primitive_op(_prim, ELEMENTWISE, lambda p, *xs, _fn=_fn: _fn(*xs))

primitive_op(ad_util.add_jaxvals_p, ELEMENTWISE, lambda p, a, b: a + b,
             source=lambda node, args: f"lax.add({args[0]}, {args[1]})")  # add_any == add
primitive_op(lax.round_p, ELEMENTWISE, _round)
primitive_op(lax.integer_pow_p, ELEMENTWISE, lambda p, x: x ** p["y"])
primitive_op(lax.select_n_p, ELEMENTWISE, lambda p, pred, *cases: _select_n(pred, *cases))
primitive_op(lax.clamp_p, ELEMENTWISE, lambda p, lo, x, hi: np.minimum(np.maximum(x, lo), hi))
primitive_op(lax.convert_element_type_p, ELEMENTWISE,
             lambda p, x: (x != 0) if np.dtype(p["new_dtype"]) == bool else x)
