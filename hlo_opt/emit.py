"""Graph -> JAX: a callable, readable Python source, and a jaxpr-like text listing.

All three are the same walk (`Graph.evaluate`) with a different per-node action.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from hlo_opt import ops
from hlo_opt.ir import Graph, Node
from hlo_opt.ops.pysource import NoSource, pyrepr

SOURCE_HEADER = """import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
"""


def emit_node(node: Node, args: Sequence[Any]) -> Sequence[Any]:
    return ops.get(node.op).emit(node, *args)


def run(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """Evaluate `graph` with JAX on `args` (arrays or tracers): binds every primitive
    exactly as captured."""
    return graph.evaluate(args, emit_node)


def reference(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """Evaluate `graph` with the NumPy reference of every op."""
    return graph.evaluate(args, lambda node, xs: ops.get(node.op).reference(node, *xs))


@functools.lru_cache(maxsize=128)
def to_callable(graph: Graph):
    """A function of the graph's flat inputs returning its flat outputs.  Equal graphs
    get the same function object, so `jax.jit` of it hits jax's compilation cache."""
    def optimized(*args):
        return run(graph, args)
    return optimized


def _names(graph: Graph) -> dict[Node, tuple[str, list[str]]]:
    """Each node's base name and the names of its outputs."""
    names = {n: (f"arg{i}", [f"arg{i}"]) for i, n in enumerate(graph.inputs)}
    for i, node in enumerate(n for n in graph.nodes if n.op != "input"):
        base = f"v{i}"
        names[node] = (base, [base] if len(node.types) == 1 else
                       [f"{base}_{j}" for j in range(len(node.types))])
    return names


def to_source(graph: Graph, name: str = "optimized") -> str:
    """Python source of a function `name(arg0, arg1, ...)` that returns the graph's flat
    outputs as a list.  Values with no Python spelling are read from a global `_env`
    (see `source_env`); the text says so when it needs one."""
    names, lines, env_used = _names(graph), [], False
    for node in graph.nodes:
        if node.op == "input":
            continue
        args = [names[v.node][1][v.index] for v in node.inputs]
        base, targets = names[node]
        try:
            expr = ops.get(node.op).source(node, args)
            lhs = ", ".join(targets) + ("," if _binds_list(node) and len(targets) == 1 else "")
        except NoSource:
            env_used = True
            expr = f"_env[{base!r}]({', '.join(args)})"
            lhs = ", ".join(targets) + ("," if len(targets) == 1 else "")
        lines.append(f"    {lhs} = {expr}" if targets else f"    {expr}")
    outs = ", ".join(names[v.node][1][v.index] for v in graph.outputs)
    params = ", ".join(names[n][0] for n in graph.inputs)
    note = ("# `_env` holds values with no Python spelling: run with\n"
            "# globals=hlo_opt.emit.source_env(graph).\n") if env_used else ""
    return (f"{SOURCE_HEADER}\n{note}\ndef {name}({params}):\n" + "\n".join(lines) +
            f"\n    return [{outs}]\n")


def _binds_list(node: Node) -> bool:
    """Whether the node's source expression returns a sequence (a multiple-results
    primitive), even of one element."""
    prim = node.params["primitive"] if node.op == "opaque" else ops.get(node.op).primitive
    return bool(prim is not None and prim.multiple_results)


def source_env(graph: Graph) -> dict[str, Any]:
    """The globals `to_source`'s text needs: `_env` maps a node's name to a function
    emitting that node (for nodes whose params have no Python spelling)."""
    names = _names(graph)
    env = {names[n][0]: functools.partial(emit_node_tuple, n)
           for n in graph.nodes if n.op != "input"}
    return {"_env": env}


def emit_node_tuple(node: Node, *args: Any) -> tuple:
    return tuple(emit_node(node, args))


def to_text(graph: Graph) -> str:
    """A jaxpr-like listing, one node per line."""
    names = _names(graph)
    lines = [f"graph({', '.join(f'{names[n][0]}:{n.types[0]}' for n in graph.inputs)}) {{"]
    for node in graph.nodes:
        if node.op == "input":
            continue
        params = ", ".join(f"{k}={_short(v)}" for k, v in node.params.items())
        outs = " ".join(f"{n}:{t}" for n, t in zip(names[node][1], node.types))
        args = " ".join(names[v.node][1][v.index] for v in node.inputs)
        op = node.op if node.op != "opaque" else f"opaque<{node.params['primitive'].name}>"
        lhs = f"{outs} = " if outs else ""
        lines.append(f"  {lhs}{op}[{params}] {args}".replace("[] ", " "))
    lines.append(f"  return {', '.join(names[v.node][1][v.index] for v in graph.outputs)}\n}}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    try:
        text = pyrepr(value)
    except NoSource:
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
