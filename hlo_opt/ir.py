"""The graph IR: `TensorType`, `Node`, `Value` and the immutable `Graph`.

A node is an op name (a lax primitive's name, or one of ours: input, const, relu,
opaque), its input values, canonical params, and its output types.  Nodes are never
mutated; a rewrite builds new nodes and a new Graph.  Effectful nodes (debug prints,
callbacks) carry `deps`, an ordering edge to the previous effect, so every valid
topological order keeps their program order.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from jax._src import core as jax_core

from hlo_opt.params import Params


class GraphError(ValueError):
    """A graph that violates the IR's invariants (wrong types, dangling values)."""


@dataclasses.dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: Any
    weak_type: bool = False

    @classmethod
    def from_aval(cls, aval) -> "TensorType":
        if not isinstance(aval, jax_core.ShapedArray):
            raise GraphError(f"unsupported abstract value {aval!r} (not a shaped array)")
        return cls(tuple(int(d) for d in aval.shape), aval.dtype, bool(aval.weak_type))

    @property
    def aval(self) -> jax_core.ShapedArray:
        return jax_core.ShapedArray(self.shape, self.dtype, weak_type=self.weak_type)

    @property
    def size(self) -> int:
        return math.prod(self.shape)      # (np.prod: 35x the time, in every pricing)

    @property
    def nbytes(self) -> int:
        itemsize = getattr(self.dtype, "itemsize", None)     # extended dtypes (PRNG keys) too
        return self.size * (itemsize if isinstance(itemsize, int) else np.dtype(self.dtype).itemsize)

    def __str__(self) -> str:
        return self._text

    @functools.cached_property
    def _text(self) -> str:        # (read by the digest of every node a rewrite builds)
        weak = "~" if self.weak_type else ""
        return f"{weak}{self.dtype}[{','.join(map(str, self.shape))}]"


_CREATION = itertools.count()


class Value(NamedTuple):
    """Output `index` of `node`."""

    node: "Node"
    index: int

    @property
    def type(self) -> TensorType:
        return self.node.types[self.index]


class Node:
    """One operation.  Identity is the object; structure is `digest`."""

    __slots__ = ("op", "inputs", "params", "types", "deps", "_digest", "_seq", "_parents")

    def __init__(self, op: str, inputs: Iterable[Value], params: Params,
                 types: Iterable[TensorType], deps: Iterable["Node"] = ()):
        self.op = op
        self.inputs = tuple(inputs)
        self.params = params if isinstance(params, Params) else Params(params)
        self.types = tuple(types)
        self.deps = tuple(deps)
        self._digest = None
        self._seq = next(_CREATION)   # parents are always created before their users
        self._parents = None   # made when first asked: a node is never changed, and the
        # partition asks for them again and again (its outputs are not kept: they would
        # hold the node itself, a cycle only the garbage collector frees)

    @property
    def outputs(self) -> tuple[Value, ...]:
        if len(self.types) == 1:
            return (Value(self, 0),)
        return tuple(Value(self, i) for i in range(len(self.types)))

    def out(self, index: int = 0) -> Value:
        return Value(self, index)

    def parents(self) -> tuple["Node", ...]:
        if self._parents is None:
            self._parents = tuple(v.node for v in self.inputs) + self.deps
        return self._parents

    @property
    def digest(self) -> str:
        """Structural hash: equal for structurally equal subgraphs, whatever their
        creation order.  Computed bottom-up without recursion (see Graph)."""
        if self._digest is None:
            for node in _postorder([self]):
                node._set_digest()
        return self._digest

    def _set_digest(self) -> None:
        if self._digest is not None:
            return
        text = "|".join([
            self.op, self.params.key, ";".join(map(str, self.types)),
            ",".join(f"{v.node._digest}:{v.index}" for v in self.inputs),
            ",".join(d._digest for d in self.deps),
        ])
        self._digest = hashlib.sha256(text.encode()).hexdigest()[:32]

    def __repr__(self) -> str:
        return f"Node({self.op}, {', '.join(map(str, self.types))})"


def _postorder(roots: Iterable[Node]) -> list[Node]:
    """Parents before children, in a deterministic order (iterative DFS)."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        stack = [(root, iter(root.parents()))]
        seen.add(id(root))
        while stack:
            node, it = stack[-1]
            for parent in it:
                if id(parent) not in seen:
                    seen.add(id(parent))
                    stack.append((parent, iter(parent.parents())))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def copy_nodes(nodes: Iterable[Node], env: dict[Value, Value], *,
               outside_deps: bool = True) -> dict[Node, Node]:
    """Clone `nodes` (in order) onto the values in `env`, which is extended with their
    outputs; effect dependencies follow the clones. A dependency on a node not among
    `nodes` is an error, or dropped with `outside_deps=False` (a piece cut out to run
    alone). Returns node -> clone."""
    clones: dict[Node, Node] = {}
    for node in nodes:
        deps = [clones[d] for d in node.deps if outside_deps or d in clones]
        clone = Node(node.op, [env[v] for v in node.inputs], node.params, node.types, deps)
        clones[node] = clone
        env.update(zip(node.outputs, clone.outputs))
    return clones


def rebase(graph: "Graph", inputs: Sequence[Node]) -> "Graph":
    """`graph` computed from `inputs` instead of its own (one each, in order, of the
    same types): a graph found for one block of a model, put on another's weights."""
    if graph.effects:
        raise GraphError("rebase of a graph with effects")
    env = {a.out(): b.out() for a, b in zip(graph.inputs, inputs)}
    copy_nodes([n for n in graph.nodes if n.op != "input"], env)
    return Graph(inputs, [env[v] for v in graph.outputs])


def replace(graph: "Graph", subst: dict[Value, Value], images: dict | None = None
            ) -> "Graph":
    """`graph` with each value in `subst` replaced by its image; the consumers of a
    replaced value are rebuilt (and theirs, and so on), everything else is shared.
    Images may read values that are themselves replaced (a chain of rewrites taken at
    once): every read, in the graph or in an image, goes to the final image. A
    substitution that would make a cycle raises GraphError. `images`, where given, is
    filled with node -> the node standing for it in the result (itself, or its rebuild)."""
    def final(v: Value) -> Value:
        for _ in range(len(subst) + 1):
            if v not in subst:
                return v
            v = subst[v]
        raise GraphError("substitution chain loops")

    built: dict[Node, Node] = {}
    open_: set[Node] = set()
    roots = [final(v).node for v in graph.outputs] + list(graph.effects) + list(graph.inputs)
    stack = [(n, False) for n in reversed(roots)]
    while stack:
        node, post = stack.pop()
        if post:
            inputs = [final(v) for v in node.inputs]
            inputs = [Value(built[v.node], v.index) for v in inputs]
            deps = [built[d] for d in node.deps]
            same = inputs == list(node.inputs) and deps == list(node.deps)
            built[node] = node if same else Node(node.op, inputs, node.params, node.types, deps)
            open_.discard(node)
            continue
        if node in built:
            continue
        if node in open_:
            raise GraphError("substitution makes a cycle")
        open_.add(node)
        stack.append((node, True))
        stack.extend((p, False) for p in reversed([final(v).node for v in node.inputs]
                                                  + list(node.deps)) if p not in built)
    if images is not None:
        images.update(built)
    return Graph(graph.inputs, [Value(built[final(v).node], final(v).index)
                                for v in graph.outputs], [built[n] for n in graph.effects])


def subgraph(values: Sequence[Value], leaves: Sequence[Value], *,
             keep_constants: bool = True, indices: Sequence[int] | None = None,
             used_only: bool = False) -> tuple["Graph", list[Value]]:
    """A graph computing `values` from fresh inputs standing for `leaves`; returns it and
    its outputs (the images of `values`). With `keep_constants`, leaves computed from
    constants alone (a pad value) stay computed rather than becoming inputs: a rule's
    guard may have relied on their value. Otherwise every distinct leaf is an input,
    in order, its `index` its position among them, or `indices[i]` for leaf i. With
    `used_only`, leaves that `values` do not read get no input."""
    stops = {v for v in leaves if not (keep_constants and is_constant(v))}
    order: list[Node] = []
    used: set[Value] = {v for v in values if v in stops}
    seen: set[Node] = set()
    stack = [(v.node, False) for v in values if v not in stops]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for u in node.inputs:
            if u in stops:
                used.add(u)
            elif u.node not in seen:
                stack.append((u.node, False))
    env: dict[Value, Value] = {}
    inputs = []
    for i, v in enumerate(leaves):
        if v in stops and v not in env and (v in used or not used_only):
            index = len(inputs) if indices is None else indices[i]
            inputs.append(Node("input", (), Params(index=index), (v.type,)))
            env[v] = inputs[-1].out()
    copy_nodes(order, env, outside_deps=False)
    outs = [env[v] for v in values]
    return Graph(inputs, outs), outs


def is_constant(value: Value) -> bool:
    """`value` is computed from constants alone (no input, no effect)."""
    stack, seen = [value.node], set()
    while stack:
        node = stack.pop()
        if node.op == "input" or node.deps:
            return False
        if node not in seen:
            seen.add(node)
            stack.extend(v.node for v in node.inputs)
    return True


class Graph:
    """An immutable dataflow graph with ordered inputs, outputs and effects."""

    def __init__(self, inputs: Sequence[Node], outputs: Sequence[Value],
                 effects: Sequence[Node] = ()):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.effects = tuple(effects)
        if any(n.op != "input" for n in self.inputs):
            raise GraphError("graph inputs must be 'input' nodes")
        # Creation order is a topological order; for a captured graph it is the jaxpr's
        # equation order, which keeps autodiff's accumulation order (and so gradients)
        # bit-identical to the original program's.
        reachable = _postorder(list(self.inputs) + [v.node for v in self.outputs]
                               + list(self.effects))
        self.nodes = tuple(sorted(reachable, key=lambda n: n._seq))
        for node in self.nodes:
            node._set_digest()
        stray = [n for n in self.nodes if n.op == "input" and n not in self.inputs]
        if stray:
            raise GraphError(f"{len(stray)} input node(s) not listed among the graph inputs")
        text = "|".join([",".join(n.digest for n in self.inputs),
                         ",".join(f"{v.node.digest}:{v.index}" for v in self.outputs),
                         ",".join(n.digest for n in self.effects)])
        self.digest = hashlib.sha256(text.encode()).hexdigest()[:32]

    def users(self) -> dict[Node, list[Node]]:
        """node -> the nodes that read it (a value or an effect dependency), in order;
        a walk of the graph each call."""
        out: dict[Node, list[Node]] = {}
        for node in self.nodes:
            for parent in node.parents():
                out.setdefault(parent, []).append(node)
        return out

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.digest == other.digest

    def __len__(self) -> int:
        return len(self.nodes)

    def evaluate(self, args: Sequence[Any], apply: Callable[[Node, list], Sequence]) -> list:
        """The one interpreter: feed `args` to the inputs and `apply(node, values)`
        to every other node in topological order; return the output values."""
        if len(args) != len(self.inputs):
            raise GraphError(f"graph takes {len(self.inputs)} inputs, got {len(args)}")
        env: dict[Node, Sequence] = {n: (a,) for n, a in zip(self.inputs, args)}
        for node in self.nodes:
            if node.op != "input":
                outs = apply(node, [env[v.node][v.index] for v in node.inputs])
                env[node] = outs
        return [env[v.node][v.index] for v in self.outputs]

    def check(self) -> "Graph":
        """Re-infer every node's output types from its inputs and params; raise
        GraphError naming the first node that disagrees.  Returns self."""
        from hlo_opt import ops
        for i, node in enumerate(self.nodes):
            if node.op == "input":
                continue
            try:
                inferred = ops.get(node.op).infer([v.type for v in node.inputs], node.params)
            except Exception as err:  # noqa: BLE001 - report any inference failure
                raise GraphError(f"node %{i} ({node.op}): type inference failed: {err}") from err
            if tuple(inferred) != node.types:
                raise GraphError(
                    f"node %{i} ({node.op}): recorded types {list(map(str, node.types))} "
                    f"but inference gives {list(map(str, inferred))}")
        return self

    def __str__(self) -> str:
        from hlo_opt.emit import to_text
        return to_text(self)
