"""The operator table (see `table.py`); importing this package fills it."""
from collections.abc import Sequence

from hlo_opt.ir import Node, Value
from hlo_opt.params import Params
from hlo_opt.ops import contractions, elementwise, reductions, special, structural  # noqa: F401
from hlo_opt.ops.special import const_value, make_const
from hlo_opt.ops.table import (CONTRACT, ELEMENTWISE, INDEX, LAYOUT, OPAQUE, OPS, REDUCE,
                               SOURCE, WINDOW, OpDef, get, lookup_primitive)



def make(op: str, inputs: Sequence[Value], **params) -> Node:
    """A new `op` node on `inputs`, its output types inferred."""
    params = Params(params)
    return Node(op, inputs, params, get(op).infer([v.type for v in inputs], params))


__all__ = ["OPS", "OpDef", "get", "lookup_primitive", "make", "make_const", "const_value",
           "CONTRACT", "ELEMENTWISE", "INDEX", "LAYOUT", "OPAQUE", "REDUCE", "SOURCE", "WINDOW"]
