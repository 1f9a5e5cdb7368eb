"""Node parameters: an immutable mapping with a canonical, process-stable text form.

Params come straight from jaxpr equations (dimension numbers, dtypes, enums, nested
jaxprs, callables).  Two nodes are structurally equal when their op, params, types and
inputs are; `canonical` is what makes "params equal" decidable and hashable for every
value jax puts there, including the unhashable ones.
"""
from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from jax.extend import core as jcore


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def canonical(value: Any) -> str:
    """A text that is equal for equal params and (within a process) differs otherwise.

    Values with a meaningful structure (numbers, tuples, dtypes, enums, named tuples,
    arrays, jaxprs, primitives by name) get a process-stable text.  Opaque objects
    (callables, wrapped functions) get their type and Python hash: stable within one
    process, so two captures of the same function agree, and a different object never
    compares equal.
    """
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return f"dtype:{np.dtype(value).name}"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, np.ndarray) or hasattr(value, "__array__") and hasattr(value, "dtype"):
        arr = np.asarray(value)
        return f"array:{arr.dtype.name}{arr.shape}:{digest_bytes(arr.tobytes())}"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        inner = ",".join(f"{f}={canonical(getattr(value, f))}" for f in value._fields)
        return f"{type(value).__name__}({inner})"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(canonical(v) for v in value) + ")"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{canonical(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, jcore.ClosedJaxpr):
        return f"closed[{canonical(value.jaxpr)};{canonical(tuple(value.consts))}]"
    if isinstance(value, jcore.Jaxpr):
        return "jaxpr[" + _jaxpr_text(value) + "]"
    if isinstance(value, jcore.Primitive):
        return _primitive_text(value)
    if hasattr(value, "__dataclass_fields__"):
        inner = ",".join(f"{f}={canonical(getattr(value, f))}" for f in value.__dataclass_fields__)
        return f"{type(value).__name__}({inner})"
    try:
        return f"obj:{type(value).__module__}.{type(value).__qualname__}#{hash(value):x}"
    except TypeError:
        return f"obj:{type(value).__module__}.{type(value).__qualname__}@{id(value):x}"


_PRIMITIVES: dict[str, jcore.Primitive] = {}   # name -> the first primitive of that name


def _primitive_text(prim: jcore.Primitive) -> str:
    """A primitive by its name, which is stable across processes (an opaque node holds
    one: the on-disk cache of optimised graphs must find it again), unless another
    primitive of that name came first in this process: then by the object too."""
    first = _PRIMITIVES.setdefault(prim.name, prim)
    return f"primitive:{prim.name}" if first is prim else f"primitive:{prim.name}@{id(prim):x}"


def _jaxpr_text(jaxpr) -> str:
    """Pretty-printed text plus the canonical form of every nested param.

    The printer elides consts of nested closed jaxprs and prints callables by name, so
    the params of every equation are added in canonical form as well.
    """
    parts = [str(jaxpr)]
    for eqn in jaxpr.eqns:
        parts.append(canonical(dict(eqn.params)))
    return digest_bytes("\n".join(parts).encode())


class Params(Mapping):
    """Immutable, hashable mapping of node parameters (keys sorted)."""

    __slots__ = ("_items", "_key", "_hash")

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any):
        merged = dict(items or {}, **kwargs)
        self._items = dict(sorted(merged.items()))
        self._key = None
        self._hash = None

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = canonical(self._items)
        return self._key

    def __getitem__(self, name: str) -> Any:
        return self._items[name]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.key)
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Params) and self.key == other.key

    def replace(self, **changes: Any) -> "Params":
        return Params(self._items, **changes)

    def __repr__(self) -> str:
        return "Params(" + ", ".join(f"{k}={v!r}" for k, v in self._items.items()) + ")"
