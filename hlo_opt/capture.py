"""jaxpr -> Graph.

One walk over a jaxpr's equations (the shape of `jax.core.eval_jaxpr`); each equation
goes through `capture_rules[primitive name]`, or `default_rule` when none is listed.
Nested `jit` / `closed_call` bodies are inlined, and `jax.checkpoint` ones as jax lowers
them (`remat_rule`); `custom_jvp_call` and `custom_vjp_call` stay opaque (inlining them
changes gradients) except `jax.nn.relu`, which becomes our `relu` op.  Effectful
equations are chained in program order.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax import lax
from jax.extend import core as jcore
from jax.tree_util import PyTreeDef, tree_flatten, tree_unflatten

from hlo_opt import ops
from hlo_opt.ir import Graph, Node, TensorType, Value
from hlo_opt.params import Params


class CaptureError(ValueError):
    """A jaxpr that cannot be captured as a Graph."""


def closes_over_tracers(closed: jcore.ClosedJaxpr) -> bool:
    return any(isinstance(c, jax.core.Tracer) for c in closed.consts)


@dataclasses.dataclass(frozen=True)
class Captured:
    graph: Graph
    jaxpr: jcore.ClosedJaxpr
    in_tree: PyTreeDef        # of ((dynamic positional args...), {dynamic kwargs})
    out_tree: PyTreeDef


class _Walk:
    """Capture state shared by a jaxpr and everything inlined into it."""

    def __init__(self):
        self.effects: list[Node] = []

    def node(self, op: str, args: Sequence[Value], params: Params,
             types: Sequence[TensorType], effectful: bool = False) -> Node:
        deps = self.effects[-1:] if effectful else ()
        node = Node(op, args, params, types, deps)
        if effectful:
            self.effects.append(node)
        return node

    def const(self, value: Any, aval) -> Value:
        if isinstance(value, jax.core.Tracer):
            raise CaptureError("the function closes over a value traced by an enclosing "
                               "transformation; only functions of their arguments are "
                               "optimised (pass that value as an argument)")
        return ops.make_const(value, TensorType.from_aval(aval)).out()

    def walk(self, jaxpr: jcore.Jaxpr, consts: Sequence[Any], args: Sequence[Value]) -> list[Value]:
        env: dict[jcore.Var, Value] = {}

        def read(atom) -> Value:
            return self.const(atom.val, atom.aval) if isinstance(atom, jcore.Literal) else env[atom]

        for var, value in zip(jaxpr.constvars, consts):
            env[var] = self.const(value, var.aval)
        env.update(zip(jaxpr.invars, args))
        for eqn in jaxpr.eqns:
            rule = capture_rules.get(eqn.primitive.name, default_rule)
            outs = rule(self, eqn, [read(v) for v in eqn.invars])
            for var, value in zip(eqn.outvars, outs):
                if not isinstance(var, jcore.DropVar):
                    env[var] = value
        return [read(v) for v in jaxpr.outvars]


def _out_types(eqn) -> list[TensorType]:
    return [TensorType.from_aval(v.aval) for v in eqn.outvars]


def default_rule(walk: _Walk, eqn, args: list[Value]) -> tuple[Value, ...]:
    """A table op when the primitive has an entry, else an opaque node re-binding it."""
    op = ops.lookup_primitive(eqn.primitive)
    if op is not None:
        params, name = Params(eqn.params), op.name
    else:
        params, name = Params(eqn.params, primitive=eqn.primitive), "opaque"
    return walk.node(name, args, params, _out_types(eqn), effectful=bool(eqn.effects)).outputs


def _inline(param: str):
    def inline_rule(walk: _Walk, eqn, args: list[Value]) -> list[Value]:
        body = eqn.params[param]
        if isinstance(body, jcore.ClosedJaxpr):
            return walk.walk(body.jaxpr, body.consts, args)
        return walk.walk(body, (), args)
    return inline_rule


def remat_rule(walk: _Walk, eqn, args: list[Value]) -> Sequence[Value]:
    """`jax.checkpoint`. In a backward pass (`differentiated`) jax lowers the body inline
    behind an optimization barrier on its inputs, so that XLA does not share the
    recomputation with the forward pass and keep its values alive; inlined behind the
    same barrier, the body is open to the rules and the memory plan is the user's.
    Not yet differentiated, it stays opaque: a `grad` taken outside the optimised
    program then recomputes the body as under `jax.jit` (inlined, its intermediates
    would be saved for the backward pass instead)."""
    if not eqn.params.get("differentiated", False):
        return default_rule(walk, eqn, args)
    guard = eqn.params.get("prevent_cse", True)
    guard = (guard,) * len(args) if isinstance(guard, bool) else guard
    held = [a for a, g in zip(args, guard) if g]
    if held:
        barrier = iter(walk.node("opaque", held, Params(primitive=lax.optimization_barrier_p),
                                 [a.type for a in held]).outputs)
        args = [next(barrier) if g else a for a, g in zip(args, guard)]
    return _inline("jaxpr")(walk, eqn, args)


def _is_relu(eqn) -> bool:
    """True when this custom_jvp_call is `jax.nn.relu`: its jvp closure leads to
    exactly `jax.nn.relu.jvp` (an identity check, so a look-alike is never taken)."""
    if eqn.params.get("num_consts") != 0 or len(eqn.invars) != 1:
        return False
    target = getattr(jax.nn.relu, "jvp", None)
    frontier, seen = [eqn.params.get("jvp_jaxpr_fun")], set()
    while frontier and len(seen) < 64:
        obj = frontier.pop()
        if obj is None or id(obj) in seen:
            continue
        if obj is target:
            return True
        seen.add(id(obj))
        if hasattr(obj, "f") and hasattr(obj, "transforms"):      # lu.WrappedFun
            frontier.append(obj.f)
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                frontier.append(cell.cell_contents)
            except ValueError:
                pass
    return False


def custom_jvp_rule(walk: _Walk, eqn, args: list[Value]) -> tuple[Value, ...]:
    if _is_relu(eqn):
        return walk.node("relu", args, Params(), _out_types(eqn)).outputs
    return default_rule(walk, eqn, args)


capture_rules: dict[str, Callable[[_Walk, Any, list[Value]], Sequence[Value]]] = {
    "jit": _inline("jaxpr"),
    "pjit": _inline("jaxpr"),
    "closed_call": _inline("call_jaxpr"),
    "core_call": _inline("call_jaxpr"),
    "remat2": remat_rule,
    "checkpoint": remat_rule,
    "custom_jvp_call": custom_jvp_rule,
}


def from_jaxpr(closed: jcore.ClosedJaxpr) -> Graph:
    """The Graph of a closed jaxpr; every node keeps the jaxpr's recorded types."""
    walk = _Walk()
    inputs = [Node("input", (), Params(index=i), (TensorType.from_aval(v.aval),))
              for i, v in enumerate(closed.jaxpr.invars)]
    outputs = walk.walk(closed.jaxpr, closed.consts, [n.out() for n in inputs])
    return Graph(inputs, outputs, walk.effects)


def split_static(args: Sequence[Any], kwargs: dict[str, Any], static_argnums: Sequence[int],
                 static_argnames: Sequence[str]):
    """Separate static from dynamic arguments: returns (dynamic leaves, in_tree,
    rebuild) where rebuild(leaves) gives back (args, kwargs) with the statics in place."""
    static_pos = {i % len(args) for i in static_argnums if -len(args) <= i < len(args)}
    dynamic = (tuple(a for i, a in enumerate(args) if i not in static_pos),
               {k: v for k, v in kwargs.items() if k not in static_argnames})
    leaves, in_tree = tree_flatten(dynamic)

    def rebuild(new_leaves):
        dyn_args, dyn_kwargs = tree_unflatten(in_tree, new_leaves)
        it = iter(dyn_args)
        full = [a if i in static_pos else next(it) for i, a in enumerate(args)]
        return full, {**{k: v for k, v in kwargs.items() if k in static_argnames}, **dyn_kwargs}
    return leaves, in_tree, rebuild


def spec_of(leaf: Any) -> jax.ShapeDtypeStruct:
    aval = jax.typeof(leaf)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def trace(fun: Callable, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
          static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = ()):
    """Trace `fun(*args, **kwargs)` (arrays, tracers or pytrees of them) to a closed
    jaxpr over the flattened dynamic arguments: returns (jaxpr, in_tree, out_tree).
    Errors raised here are the user's function's own."""
    leaves, in_tree, rebuild = split_static(args, kwargs or {}, static_argnums, static_argnames)
    out_tree_box: list[PyTreeDef] = []

    def flat_fun(*flat):
        full_args, full_kwargs = rebuild(flat)
        out_leaves, out_tree = tree_flatten(fun(*full_args, **full_kwargs))
        out_tree_box.append(out_tree)
        return out_leaves

    closed = jax.make_jaxpr(flat_fun)(*[spec_of(x) for x in leaves])
    return closed, in_tree, out_tree_box[-1]


def capture(fun: Callable, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
            static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = ()) -> Captured:
    """`trace` then `from_jaxpr`: the Graph of `fun` at these arguments."""
    closed, in_tree, out_tree = trace(fun, args, kwargs, static_argnums=static_argnums,
                                      static_argnames=static_argnames)
    return Captured(from_jaxpr(closed), closed, in_tree, out_tree)
