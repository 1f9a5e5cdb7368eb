"""Our own ops: `input`, `const`, `relu` and `opaque`.

- `const` holds a NumPy array (param `value`); weak-typed scalars are re-emitted as
  jax's weak literals so type promotion is unchanged.
- `relu` stands for `jax.nn.relu` (a custom_jvp); it emits that same function, so its
  gradient rule (0 at 0) is kept.
- `opaque` holds a primitive we have no entry for (param `primitive`) and its params,
  and re-binds it unchanged.
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax import lax
from jax._src import literals

from hlo_opt.ir import GraphError, Node, TensorType
from hlo_opt.ops.pysource import NoSource, call_source, pyrepr
from hlo_opt.ops.table import ELEMENTWISE, OPAQUE, SOURCE, OpDef, register
from hlo_opt.params import Params


def _no_infer(in_types, params):
    raise GraphError("input nodes have no inferable type")


def _input_only(node, *args):
    raise GraphError("input nodes are bound by the caller, not evaluated")


register(OpDef("input", SOURCE, infer=_no_infer, emit=_input_only, reference=_input_only,
               source=lambda node, args: f"<input {node.params['index']}>",
               flops=lambda node: 0, bytes=lambda node: 0))


_WEAK_SCALARS = {"i": literals.TypedInt, "f": literals.TypedFloat, "c": literals.TypedComplex}


def const_value(node: Node):
    """The value to hand to jax: weak scalars as jax's weak literals, else the array."""
    value, ty = node.params["value"], node.types[0]
    kind = np.dtype(ty.dtype).kind
    if ty.weak_type and ty.shape == () and kind in _WEAK_SCALARS:
        return _WEAK_SCALARS[kind](value.item(), np.dtype(ty.dtype))
    return value


def _const_source(node: Node, args: Sequence[str]) -> str:
    value, ty = node.params["value"], node.types[0]
    if value.size > 16:
        raise NoSource(value)
    if ty.weak_type and ty.shape == ():
        return pyrepr(value.item())
    dtype = pyrepr(np.dtype(ty.dtype))
    return f"np.asarray({pyrepr(value.tolist()) if value.ndim else pyrepr(value.item())}, {dtype})"


def make_const(value, ty: TensorType) -> Node:
    array = np.asarray(value, dtype=ty.dtype).reshape(ty.shape)
    array.setflags(write=False)
    return Node("const", (), Params(value=array, weak_type=ty.weak_type), (ty,))


register(OpDef("const", SOURCE,
               infer=lambda in_types, params: (TensorType(
                   params["value"].shape, params["value"].dtype, params["weak_type"]),),
               emit=lambda node: (const_value(node),),
               reference=lambda node: (node.params["value"],),
               source=_const_source, flops=lambda node: 0,
               bytes=lambda node: node.types[0].nbytes))


register(OpDef("relu", ELEMENTWISE,
               infer=lambda in_types, params: (in_types[0],),
               emit=lambda node, x: (jax.nn.relu(x),),
               reference=lambda node, x: (np.maximum(x, np.zeros((), x.dtype)),),
               source=lambda node, args: f"jax.nn.relu({args[0]})"))


def _opaque_parts(params: Params):
    prim = params["primitive"]
    rest = {k: v for k, v in params.items() if k != "primitive"}
    return prim, rest


def _opaque_emit(node: Node, *args):
    prim, rest = _opaque_parts(node.params)
    out = prim.bind(*args, **prim.get_bind_params(rest))
    return tuple(out) if prim.multiple_results else (out,)


def _opaque_infer(in_types, params):
    node = Node("opaque", (), params, ())
    specs = [jax.ShapeDtypeStruct(t.shape, t.dtype, weak_type=t.weak_type) for t in in_types]
    outs = jax.eval_shape(lambda *xs: _opaque_emit(node, *xs), *specs)
    return tuple(TensorType(tuple(o.shape), o.dtype, bool(o.weak_type)) for o in outs)


def _opaque_reference(node: Node, *args):
    outs = jax.jit(lambda *xs: _opaque_emit(node, *xs))(*args)
    return tuple(np.asarray(o) for o in outs)


def _opaque_source(node: Node, args: Sequence[str]) -> str:
    prim, rest = _opaque_parts(node.params)
    if getattr(lax, f"{prim.name}_p", None) is not prim:
        raise NoSource(prim)
    return call_source(f"lax.{prim.name}_p.bind", args, rest)


register(OpDef("opaque", OPAQUE, infer=_opaque_infer, emit=_opaque_emit,
               reference=_opaque_reference, source=_opaque_source,
               flops=lambda node: 0))
