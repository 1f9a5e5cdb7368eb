"""The operator table: one `OpDef` per op, keyed by name, with a default for the rest.

Every op has, side by side: type inference, a JAX emitter, a NumPy reference, FLOP and
byte counts and a Python-source printer.  Ops named after a lax primitive get their type
inference and emitter from the primitive itself (`primitive_op`), so the table cannot
drift from what jax does; the NumPy reference is written independently so that tests
can hold the two against each other.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.extend import core as jcore

from hlo_opt.ir import Node, TensorType
from hlo_opt.params import Params
from hlo_opt.ops.pysource import call_source

# Op kinds, used by the cost model's kernel partition and by rules.
ELEMENTWISE, LAYOUT, REDUCE, WINDOW, CONTRACT, INDEX, SOURCE, OPAQUE = (
    "elementwise", "layout", "reduce", "window", "contract", "index", "source", "opaque")


def _io_bytes(node: Node) -> int:
    return sum(v.type.nbytes for v in node.inputs) + sum(t.nbytes for t in node.types)


def _out_size(node: Node) -> int:
    return sum(t.size for t in node.types)


def _no_flops(node: Node) -> int:
    return 0


@dataclasses.dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    infer: Callable[[Sequence[TensorType], Params], tuple[TensorType, ...]]
    emit: Callable[..., Sequence[Any]]          # (node, *jax values) -> outputs
    reference: Callable[..., Sequence[Any]]     # (node, *numpy arrays) -> outputs
    source: Callable[[Node, Sequence[str]], str]  # (node, argument names) -> expression
    flops: Callable[[Node], int] = _out_size
    bytes: Callable[[Node], int] = _io_bytes
    primitive: jcore.Primitive | None = None


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {sorted(OPS)}") from None


def lookup_primitive(prim: jcore.Primitive) -> OpDef | None:
    """The table entry standing for exactly this primitive object, if any."""
    op = OPS.get(prim.name)
    return op if op is not None and op.primitive is prim else None


def infer_from_primitive(prim: jcore.Primitive):
    def infer(in_types: Sequence[TensorType], params: Params) -> tuple[TensorType, ...]:
        out, _ = prim.abstract_eval(*[t.aval for t in in_types], **params)
        outs = out if prim.multiple_results else [out]
        return tuple(TensorType.from_aval(a) for a in outs)
    return infer


def bind_primitive(prim: jcore.Primitive):
    def emit(node: Node, *args: Any) -> Sequence[Any]:
        out = prim.bind(*args, **node.params)
        return tuple(out) if prim.multiple_results else (out,)
    return emit


@functools.lru_cache(maxsize=None)
def bound_params(name: str) -> Params:
    """The params jax's own `lax.<name>` binds its primitive with, read off a trace of
    it on scalars (`mul`'s `out_dtype`, `exp`'s and `tanh`'s `accuracy`, all None):
    what a node a rule builds takes unless the rule says otherwise (`hlo_opt.ops.make`).
    Bound without them a node still computes, but its transpose fails under `grad`
    (`mul`'s rule asks for `out_dtype`), and it differs in digest from the same op
    captured from a program. Empty where lax has no plain function of that name."""
    fn, prim = getattr(lax, name, None), getattr(lax, f"{name}_p", None)
    if fn is None or prim is None or name not in _PLAIN_LAX_FUNCTIONS:
        return Params()
    for arity in (1, 2, 3):
        for dtype in (np.float32, np.int32, np.bool_):
            try:
                eqns = jax.make_jaxpr(fn)(*[np.zeros((), dtype)] * arity).eqns
            except Exception:  # noqa: BLE001 - not this arity or dtype: the next
                continue
            if len(eqns) == 1 and eqns[0].primitive is prim:
                return Params(eqns[0].params)
    return Params()


def primitive_source(prim: jcore.Primitive):
    """`lax.add(a, b)` where lax has a function of that name that binds exactly this
    primitive with the node's params (`bound_params`), else
    `lax.<name>_p.bind(a, b, k=v)`."""
    public = getattr(lax, prim.name, None) if prim.name in _PLAIN_LAX_FUNCTIONS else None

    def source(node: Node, args: Sequence[str]) -> str:
        if public is not None and node.params == bound_params(prim.name):
            return f"lax.{prim.name}({', '.join(args)})"
        return call_source(f"lax.{prim.name}_p.bind", args, node.params)
    return source


# lax functions that bind their primitive unchanged when given same-dtype arrays.
_PLAIN_LAX_FUNCTIONS = frozenset(
    "neg exp exp2 log log1p expm1 tanh logistic sin cos tan asin acos atan sinh cosh "
    "asinh acosh atanh sqrt rsqrt cbrt abs sign floor ceil is_finite erf erfc erf_inv "
    "square add sub mul div rem pow max min atan2 nextafter eq ne lt le gt ge select_n "
    "clamp stop_gradient".split())


def numpy_reference(fn: Callable[..., Any], *, compute_dtype=None):
    """Wrap `fn(params, *arrays) -> array | list` as a reference that returns outputs
    cast to the node's recorded dtypes (low-precision floats are computed in f32)."""
    def reference(node: Node, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        arrays = [_widen(np.asarray(a)) for a in args]
        with np.errstate(all="ignore"):       # XLA yields inf/nan silently; so do we
            out = fn(node.params, *arrays)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return tuple(_cast(np.asarray(o), t) for o, t in zip(outs, node.types))
    return reference


def _cast(a: np.ndarray, t: TensorType) -> np.ndarray:
    """`a` in the node's dtype and shape; object arrays (symbolic values: the rule
    verifier runs references on z3 terms) keep their elements."""
    return (a if a.dtype == object else a.astype(t.dtype)).reshape(t.shape)


def as_float64(a: np.ndarray) -> np.ndarray:
    """Widen for exact-ish reference arithmetic; object arrays pass through."""
    return a if a.dtype == object else a.astype(np.float64)


def _widen(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "V" or (a.dtype.kind == "f" and a.dtype.itemsize < 4) or \
            a.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return a.astype(np.float32)
    return a


def primitive_op(prim: jcore.Primitive, kind: str, reference: Callable[..., Any], *,
                 flops: Callable[[Node], int] | None = None,
                 source: Callable[[Node, Sequence[str]], str] | None = None,
                 name: str | None = None) -> OpDef:
    return register(OpDef(
        name=name or prim.name, kind=kind, primitive=prim,
        infer=infer_from_primitive(prim), emit=bind_primitive(prim),
        reference=numpy_reference(reference),
        source=source or primitive_source(prim),
        flops=flops or (_no_flops if kind in (LAYOUT, INDEX) else _out_size)))
