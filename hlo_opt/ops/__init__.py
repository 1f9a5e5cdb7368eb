"""The operator table (see `table.py`); importing this package fills it."""
import functools
from collections.abc import Sequence

import jax

from hlo_opt.ir import Node, Value
from hlo_opt.params import Params
from hlo_opt.ops import contractions, elementwise, reductions, special, structural  # noqa: F401
from hlo_opt.ops.special import const_value, make_const
from hlo_opt.ops.table import (CONTRACT, ELEMENTWISE, INDEX, LAYOUT, OPAQUE, OPS, REDUCE,
                               SOURCE, WINDOW, OpDef, bound_params, get, lookup_primitive)



def make(op: str, inputs: Sequence[Value], **params) -> Node:
    """A new `op` node on `inputs`, its output types inferred; params the rule leaves
    out are those jax's own function binds (`table.bound_params`)."""
    bound = bound_params(op)       # one object, its digest text made once: a search
    params = Params({**bound, **params}) if params else bound   # makes thousands
    types = tuple(v.type for v in inputs)
    return Node(op, inputs, params, _inferred(op, types, params, jax.config.jax_enable_x64))


@functools.lru_cache(maxsize=1 << 16)
def _inferred(op: str, types: tuple, params: Params, x64: bool) -> tuple:
    """An op's output types, remembered: a search makes the same few ops on the same
    types thousands of times, and inferring them through jax's abstract evaluation was
    a tenth of a sampling search's time (cProfile, Inception's parts at 4 C blocks).
    `x64` keys the jax setting that inference reads."""
    return get(op).infer(list(types), params)


__all__ = ["OPS", "OpDef", "get", "lookup_primitive", "make", "make_const", "const_value",
           "CONTRACT", "ELEMENTWISE", "INDEX", "LAYOUT", "OPAQUE", "REDUCE", "SOURCE", "WINDOW"]
