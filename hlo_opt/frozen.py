"""Frozen arguments: the part of a graph computed once per weight value, and the rest.

With `frozen_argnums`, subgraphs that depend only on frozen inputs and constants
(concatenated weights, transposed or block-diagonal kernels) need not run on every call.
`split` cuts a graph there: `weights` maps the frozen inputs to the values the per-call
part reads, and `runtime` takes the live inputs followed by those values.
"""
from __future__ import annotations

import dataclasses
import operator
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from hlo_opt import compile_options, emit, ops
from hlo_opt.ir import Graph, Node, Value, copy_nodes
from hlo_opt.ops.table import OPAQUE
from hlo_opt.params import Params

LITERALS = frozenset({"const", "iota"})    # stay in the per-call program: XLA folds them
EXPANDING = frozenset({"broadcast_in_dim"})  # read by per-call work, they stay in it too


def weight_only(graph: Graph, frozen: Iterable[int]) -> set[Node]:
    """Nodes computed from frozen inputs and constants alone (no effects, no opaque ops)."""
    frozen = set(frozen)
    effectful = set(graph.effects) | {d for n in graph.nodes for d in n.deps}
    out: set[Node] = set()
    for node in graph.nodes:
        if node.op == "input":
            if node.params["index"] in frozen:
                out.add(node)
        elif node.op in LITERALS:
            out.add(node)
        elif node.inputs and not node.deps and node not in effectful and \
                ops.get(node.op).kind != OPAQUE and all(v.node in out for v in node.inputs):
            out.add(node)
    return out


def _recomputed(graph: Graph, fixed: set[Node]) -> set[Node]:
    """Weight-only nodes the per-call program computes itself: literals, and broadcasts
    that per-call work reads. XLA fuses a broadcast into its readers, where it costs
    nothing; computed once, it is an array of the full shape to read on every call, and
    the fusions around it change: SRU's bias broadcasts over the 32 steps, precomputed,
    took its per-call program from 59 fusions to 74."""
    again = {n for n in fixed if n.op in LITERALS}
    read = {v.node for n in graph.nodes if n not in fixed for v in n.inputs}
    read.update(v.node for v in graph.outputs)
    return again | {n for n in fixed if n.op in EXPANDING and n in read}


@dataclasses.dataclass(frozen=True)
class Split:
    weights: Graph             # frozen inputs (in order) -> boundary values
    runtime: Graph             # live inputs (in order), then boundary values -> outputs
    frozen: tuple[int, ...]    # original input indices feeding `weights`
    live: tuple[int, ...]      # original input indices feeding `runtime`


def _input(index: int, value: Value) -> Node:
    return Node("input", (), Params(index=index), (value.type,))


def split(graph: Graph, frozen: Iterable[int]) -> Split:
    frozen = tuple(sorted(set(frozen)))
    fixed = weight_only(graph, frozen)
    again = _recomputed(graph, fixed)
    runs = [n for n in graph.nodes if n.op != "input" and (n not in fixed or n in again)]
    reads = [v for n in runs for v in n.inputs] + list(graph.outputs)
    # Structurally equal weight values (the same concatenated weights, built once per
    # step of an unrolled RNN) are computed once and read as one input.
    key = {v: (v.node.digest, v.index) for v in reads if v.node in fixed and v.node not in again}
    first = {}
    for v, k in key.items():
        first.setdefault(k, v)
    boundary = list(first.values())

    w_env: dict[Value, Value] = {}
    w_inputs = []
    for node in graph.inputs:
        if node in fixed:
            w_inputs.append(_input(len(w_inputs), node.out()))
            w_env[node.out()] = w_inputs[-1].out()
    copy_nodes([n for n in graph.nodes if n in fixed and n.op != "input"], w_env)
    weights = Graph(w_inputs, [w_env[v] for v in boundary])

    r_env: dict[Value, Value] = {}
    r_inputs = []
    live = [i for i, n in enumerate(graph.inputs) if n not in fixed]
    for value in [graph.inputs[i].out() for i in live] + boundary:
        r_inputs.append(_input(len(r_inputs), value))
        r_env[value] = r_inputs[-1].out()
    r_env.update((v, r_env[first[k]]) for v, k in key.items())
    clones = copy_nodes(runs, r_env)
    runtime = Graph(r_inputs, [r_env[v] for v in graph.outputs],
                    [clones[n] for n in graph.effects])
    return Split(weights, runtime, frozen, tuple(live))


AVAL = operator.attrgetter("aval")   # a jax array's (or tracer's) aval, read in C


def traced(leaves: Sequence[Any]) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def picker(positions: Sequence[int]) -> Callable[[Sequence], tuple]:
    """`seq -> tuple(seq[i] for i in positions)`, in C (`operator.itemgetter`): on the
    H100's host a Python loop took 0.2 us a leaf (a tracer test of ResNet-50's 56, 13 us)."""
    positions = tuple(positions)
    if len(positions) == 1:
        one = operator.itemgetter(positions[0])
        return lambda seq: (one(seq),)
    return operator.itemgetter(*positions) if positions else lambda seq: ()


class Runner:
    """Runs a graph with its weight-only part computed once per distinct frozen value.

    Distinct means distinct objects: jax arrays are immutable, so the same array object
    is the same value, and a frozen array that is still alive and the same object as
    last time needs no recomputation. A NumPy array can change in place under the same
    identity, so frozen leaves that are not all jax arrays are recomputed on every call:
    slower, never stale. The last `KEEP` weight sets are kept, keyed by the `id`s of
    their frozen leaves, which are weakly referenced: a kept set is dropped as soon as
    one of its leaves is, so no later array can stand in for it under a reused `id`.
    Comparing the `id`s is one tuple comparison in C.
    """

    KEEP = 4

    def __init__(self, graph: Graph, frozen: Iterable[int], options=None):
        """`options`: XLA compile options of both programs (`compile_options`)."""
        self.split = split(graph, frozen)
        self.options = dict(options or {})
        # A frozen input the per-call program reads as it is, is handed to it as it is:
        # returned by a jitted function it would be a copy, and the weights would be
        # held twice (13 of SRU's 14 per-call arguments were such copies).
        w = self.split.weights
        position = {n.out(): k for k, n in enumerate(w.inputs)}
        self._picks = [position.get(v) for v in w.outputs]   # frozen leaf index, or None
        made = Graph(w.inputs, [v for v in w.outputs if v not in position])
        self.precomputes = bool(made.outputs)   # else it is the graph's program as it is
        self._weights = compile_options.jit(emit.to_callable(made), options)
        self._runtime = compile_options.jit(emit.to_callable(self.split.runtime), options)
        self._frozen_of, self._live_of = picker(self.split.frozen), picker(self.split.live)
        self._memo: list[tuple[tuple[int, ...], list, Sequence[Any]]] = []
        self.computed = 0          # weight sets computed so far

    def known(self, leaves: Sequence[Any]) -> Sequence[Any] | None:
        """The weights kept for these very frozen leaves, or None."""
        ids = tuple(map(id, self._frozen_of(leaves)))
        for kept, _, weights in self._memo:
            if kept == ids:
                return weights
        return None

    def weights(self, leaves: Sequence[Any]) -> Sequence[Any]:
        weights = self.known(leaves)
        if weights is not None:
            return weights
        frozen = self._frozen_of(leaves)
        made = iter(self._weights(*frozen))
        weights = [next(made) if k is None else frozen[k] for k in self._picks]
        self.computed += 1
        if all(isinstance(leaf, jax.Array) for leaf in frozen):
            self._keep(frozen, weights)
        return weights

    def _keep(self, frozen: Sequence[Any], weights: Sequence[Any]) -> None:
        ids, me = tuple(map(id, frozen)), weakref.ref(self)

        def dropped(_):
            runner = me()
            if runner is not None:
                runner._memo = [kept for kept in runner._memo if kept[0] != ids]
        refs = [weakref.ref(leaf, dropped) for leaf in frozen]
        self._memo = [(ids, refs, weights)] + self._memo[:self.KEEP - 1]

    def forget(self) -> None:
        """Drop the kept weight sets and the count (after timing on random weights)."""
        self._memo, self.computed = [], 0

    def __call__(self, leaves: Sequence[Any], weights: Sequence[Any] | None = None) -> list[Any]:
        """`weights`: `self.weights(leaves)`, where the caller has them already."""
        if weights is None:
            weights = self.weights(leaves)
        return self._runtime(*self._live_of(leaves), *weights)

    def runtime_args(self, leaves: Sequence[Any]) -> tuple:
        """(the per-call program, its arguments): for timing it alone."""
        return self._runtime, [*self._live_of(leaves), *self.weights(leaves)]


@dataclasses.dataclass(frozen=True)
class Repeat:
    """A signature's call checked again without a Python loop over its frozen leaves:
    the same pytree structure, the same avals of the other leaves, none of them a
    tracer, and frozen leaves the runner kept weights for (the same objects,
    `Runner.known`). On the H100's host, the full check (`hlo_opt.jit`'s signature, a
    tracer test and the weight look-up) cost BERT 66 us a call (37, 18 and 11 us), and
    its calls ran 6% slower than its per-call program's own (`/tmp/s56/gpu_probe.py`)."""

    in_tree: Any
    out_tree: Any
    dynamic: Callable[[Sequence], tuple]    # leaves -> the leaves that are not frozen
    avals: tuple
    runner: Runner

    @classmethod
    def of(cls, in_tree, avals: tuple, out_tree, runner: Runner) -> "Repeat":
        """For the signature of leaves with these `avals` under `in_tree` (the leaves
        that are not frozen are the per-call program's live ones)."""
        dynamic = picker(runner.split.live)
        return cls(in_tree, out_tree, dynamic, dynamic(avals), runner)

    def __call__(self, leaves: Sequence[Any]) -> list[Any] | None:
        """The outputs' leaves, or None where the check fails."""
        dynamic = self.dynamic(leaves)
        try:
            if tuple(map(AVAL, dynamic)) != self.avals:
                return None
        except AttributeError:           # NumPy arrays, Python scalars
            return None
        if traced(dynamic):
            return None
        weights = self.runner.known(leaves)
        return None if weights is None else self.runner(leaves, weights)
