"""An optimised graph as JSON, relative to the graph it was optimised from.

The disk cache of optimised graphs needs them in a file, and never as pickle. Nodes
the optimised graph shares with the original (the same digest: same op, params, types
and inputs) are written as references and taken from the original when read back, so
the params jax put there (nested jaxprs, callables) never need a text form. The nodes
the rewrites made carry plain params: numbers, strings, tuples, dtypes, jax's enums and
named tuples (dimension numbers), small arrays, and the primitive of an opaque node,
by name (read back as the original's primitive of that name: a rewrite moves an opaque
node, it never makes one). A value of any other kind makes the graph unwritable
(`Unwritable`), and it is simply not cached. Reading back checks the rebuilt graph's
digest against the one written: a mismatch (another jax version laid out a named tuple
differently, a hand-edited file) reads as no entry.
"""
from __future__ import annotations

import base64
import enum
import importlib
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

from hlo_opt.ir import Graph, Node, TensorType
from hlo_opt.params import Params

TRUSTED = ("jax", "jaxlib", "numpy", "ml_dtypes")   # modules whose classes may be rebuilt


class Unwritable(ValueError):
    """A graph holding a param value with no JSON form."""


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _class(name: str) -> type:
    module, qualname = name.split(":")
    if module.split(".")[0] not in TRUSTED:
        raise ValueError(f"refusing to rebuild {name}: not a jax or numpy class")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return {"dtype": np.dtype(value).name}
    if isinstance(value, enum.Enum):
        return {"enum": _class_name(type(value)), "name": value.name}
    if isinstance(value, np.ndarray):
        return {"array": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode(),
                "dtype": value.dtype.name, "shape": list(value.shape)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"namedtuple": _class_name(type(value)),
                "fields": {f: encode_value(getattr(value, f)) for f in value._fields}}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [encode_value(v) for v in value]}
    if isinstance(value, jcore.Primitive):
        return {"primitive": value.name}
    raise Unwritable(f"no JSON form for a param of type {type(value).__qualname__}")


def decode_value(data: Any, primitives: dict[str, jcore.Primitive] | None = None) -> Any:
    """`primitives`: the original graph's opaque primitives by name."""
    if not isinstance(data, dict):
        return data
    if "primitive" in data:
        return (primitives or {})[data["primitive"]]
    if "dtype" in data and "array" not in data:
        return jnp.dtype(data["dtype"])
    if "enum" in data:
        return _class(data["enum"])[data["name"]]
    if "array" in data:
        raw = base64.b64decode(data["array"])
        return np.frombuffer(raw, jnp.dtype(data["dtype"])).reshape(data["shape"]).copy()
    if "namedtuple" in data:
        return _class(data["namedtuple"])(**{k: decode_value(v, primitives)
                                             for k, v in data["fields"].items()})
    if "tuple" in data:
        return tuple(decode_value(v, primitives) for v in data["tuple"])
    if "list" in data:
        return [decode_value(v, primitives) for v in data["list"]]
    raise ValueError(f"unknown encoded value {sorted(data)}")


def _type(t: TensorType) -> list:
    return [list(t.shape), np.dtype(t.dtype).name, t.weak_type]


def encode(graph: Graph, original: Graph) -> dict:
    """JSON-ready form of `graph`; nodes shared with `original` by reference."""
    known = {n.digest for n in original.nodes}
    index = {n: i for i, n in enumerate(graph.nodes)}
    rows = []
    for node in graph.nodes:
        if node.digest in known:
            rows.append({"same": node.digest})
            continue
        rows.append({"op": node.op, "params": {k: encode_value(v) for k, v in node.params.items()},
                     "inputs": [[index[v.node], v.index] for v in node.inputs],
                     "types": [_type(t) for t in node.types],
                     "deps": [index[d] for d in node.deps]})
    return {"nodes": rows, "inputs": [index[n] for n in graph.inputs],
            "outputs": [[index[v.node], v.index] for v in graph.outputs],
            "effects": [index[n] for n in graph.effects], "digest": graph.digest}


def decode(data: dict, original: Graph) -> Graph | None:
    """The graph `encode` wrote, or None if it cannot be rebuilt exactly."""
    by_digest = {n.digest: n for n in original.nodes}
    primitives = {n.params["primitive"].name: n.params["primitive"]
                  for n in original.nodes if n.op == "opaque"}
    try:
        nodes: list[Node] = []
        for row in data["nodes"]:
            if "same" in row:
                nodes.append(by_digest[row["same"]])
                continue
            nodes.append(Node(row["op"], [nodes[i].out(k) for i, k in row["inputs"]],
                              Params({k: decode_value(v, primitives)
                                      for k, v in row["params"].items()}),
                              [TensorType(tuple(s), jnp.dtype(d), bool(w))
                               for s, d, w in row["types"]],
                              [nodes[i] for i in row["deps"]]))
        graph = Graph([nodes[i] for i in data["inputs"]],
                      [nodes[i].out(k) for i, k in data["outputs"]],
                      [nodes[i] for i in data["effects"]])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return graph if graph.digest == data["digest"] else None
