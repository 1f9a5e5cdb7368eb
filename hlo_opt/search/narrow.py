"""Two moves over sequences: slices moved toward the inputs, past what only they read
(`narrow`), and per-step work over stacked steps done once on the stack (`vectorize`).

SRU's classifier reads the last step of the last layer (`stack(h_0..h_31)[:, -1]`).
Taken out of the stack, `h_31` leaves the other 31 outputs dead, and the output gate
`r = sigmoid(x @ W_r + b_r)` is read at one step only: moved above the sigmoid, the
add, the bias broadcast and the matmul, the slice leaves one row of the sequence to
project instead of 32 (Enzyme-JAX's compiled SRU does the same). Each step changes
little until the slice reaches the matmul, so the move takes them all at once, and the
search prices the result like any other graph, starting from it only when cheaper.

A slice moves above an op only when it is that op's one reader: where others read the
op too (the forget gate, read at every step), moving it would compute the op twice.
Every step is a verified rule, so the result is an equivalent graph.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from hlo_opt.ir import Graph, Node
from hlo_opt.rules.lang import Match, Rule
from hlo_opt.search.layout import saturate

TAKE = ("squeeze-of-broadcast",)          # plus every slice-of-stack-k: they only remove
PUSH = ("unary-through-slice", "binary-through-slice", "binary-through-slice-broadcast-rhs",
        "binary-through-slice-broadcast-lhs", "slice-of-broadcast", "slice-through-dot")
MAX_STEPS_PER_NODE = 2      # a bound on saturation: each step moves a slice up one op


def _takes_from_stack(rule: Rule) -> bool:
    return rule.name.startswith("slice-of-stack-")


def _per_stack(rule: Rule) -> bool:
    """A rule matched at stacks only, which `narrow` and `vectorize` saturate."""
    return _takes_from_stack(rule) or rule.name.startswith("stack-of-")


def narrow(graph: Graph, rules: Sequence[Rule]) -> tuple[Graph, list[str]] | None:
    """(graph with its slices moved up, rule names applied), or None when no slice
    moved."""
    take = [r for r in rules if r.name in TAKE or _takes_from_stack(r)]
    push = [r for r in rules if r.name in PUSH]
    budget = MAX_STEPS_PER_NODE * len(graph.nodes)
    applied: list[str] = []
    while True:               # taking a stack's operand can leave a slice the only reader
        graph, took = saturate(graph, take, budget)
        graph, pushed = saturate(graph, push, budget, only=_sole_reader)
        applied += took + pushed
        if not pushed or len(applied) >= budget:
            return (graph, applied) if applied else None


def vectorize(graph: Graph, rules: Sequence[Rule]) -> tuple[Graph, list[str]] | None:
    """(graph with per-step work over stacked steps done once on the stack, rule names
    applied), or None when nothing was stacked: SRU's first layer computes
    `r_t * tanh(c_t) + (1 - r_t) * x_t` for each of its 32 steps, then stacks them."""
    stacked = [r for r in rules if _per_stack(r) and not _takes_from_stack(r)]
    graph, applied = saturate(graph, stacked, MAX_STEPS_PER_NODE * len(graph.nodes))
    return (graph, applied) if applied else None


def _sole_reader(graph: Graph) -> Callable[[Match], bool]:
    """Whether a match's root slice is the only reader of the op it slices."""
    reads: Counter[Node] = Counter(v.node for node in graph.nodes for v in node.inputs)
    reads.update(v.node for v in graph.outputs)

    def sole(m: Match) -> bool:
        return reads[m.roots[0].node.inputs[0].node] == 1
    return sole


def after(rules: Sequence[Rule]) -> list[Rule]:
    """The rules worth matching once both moves were tried: they ran to saturation, and
    no other rule builds a stack, so the per-stack rules find nothing more; the 31
    `slice-of-stack-k` alone, matched at every slice of SRU, doubled the time to match
    all rules (40 -> 76 ms)."""
    return [r for r in rules if not _per_stack(r)]
