"""The operator table (see `table.py`); importing this package fills it."""
from hlo_opt.ops import contractions, elementwise, reductions, special, structural  # noqa: F401
from hlo_opt.ops.special import const_value, make_const
from hlo_opt.ops.table import (CONTRACT, ELEMENTWISE, INDEX, LAYOUT, OPAQUE, OPS, REDUCE,
                               SOURCE, WINDOW, OpDef, get, lookup_primitive)

__all__ = ["OPS", "OpDef", "get", "lookup_primitive", "make_const", "const_value",
           "CONTRACT", "ELEMENTWISE", "INDEX", "LAYOUT", "OPAQUE", "REDUCE", "SOURCE", "WINDOW"]
