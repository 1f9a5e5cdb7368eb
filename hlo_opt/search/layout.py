"""The layout moves: a whole network's convs to NHWC at once (TASO searches layouts as
one more choice; here it is one macro move built from the verified rules), and every
frozen matmul weight read as N x K.

One conv moved to NHWC gains little on its own: it brings a transpose on each side, and
the gain comes only when the transposes between consecutive convs cancel. A search one
rule at a time reaches that after hundreds of steps (53 convs in ResNet-50, each with
transposes to sink through ReLUs, adds, pools and concats), far past its time limit.
`relayout` takes them all: `conv-to-nhwc` on every NCHW conv, then the transpose-moving
rules, toward the outputs, until none applies. Every step is a verified rule, so the
result is an equivalent graph; the search prices it like any other and starts from it
only when it is cheaper.

`weights_nk`: XLA's CPU backend runs `x @ w` faster with w stored N x K (contracted on
its second axis) than K x N: BERT's 64x1024 @ 1024x1024 dot 0.56 -> 0.51 ms, @
1024x4096 2.26 -> 2.08 ms, 4096x1024 2.32 -> 1.88 ms (each pair timed in one batch,
2-core VM), and the whole BERT program 1.108x faster with all 48 weights so (68.9 ->
62.1 ms, 15 interleaved rounds). A frozen weight's transpose is computed once. The
gain per kernel is inside the drift between two batches of kernel timings (the same
kernels read 5-10% apart from one batch to the next), and the measured cost model
priced the whole BERT move at 1.001x: so the search takes the move unless it is
priced more than `TIE` dearer, and `measure_final` has the last word on the program.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from hlo_opt.frozen import weight_only
from hlo_opt.ir import Graph
from hlo_opt.rules.lang import Match, Rule

TO_NHWC = ("conv-to-nhwc",)
NCHW_ONE_SIDED = ("transpose-to-nchw-through-binary-lhs", "transpose-to-nchw-through-binary-rhs")
# Cancelling first, then sinking: each rule below either removes a transpose or moves
# one toward the outputs (past a unary op, a binary op whose other operand is a scalar
# or a smaller broadcast operand, a reduction, a pooling window, a slice, a concat; an
# NHWC->NCHW one also past a binary op whose other operand has none, leaving there an
# NCHW->NHWC one; no rule here moves a transpose up), so saturation ends.
SINK = ("transpose-identity", "transpose-cancel", "transpose-fuse",
        "transpose-through-binary", *(f"transpose-through-concat{k}"
                                      for k in ("", "-3", "-4", "-5", "-6", "-7", "-8")),
        "transpose-through-unary", "transpose-through-binary-scalar-lhs",
        "transpose-through-binary-scalar-rhs", "transpose-through-binary-broadcast-lhs",
        "transpose-through-binary-broadcast-rhs", "transpose-through-reduce",
        "transpose-through-window", "transpose-through-slice", *NCHW_ONE_SIDED)
MAX_STEPS_PER_NODE = 10     # a bound on saturation, far above what the zoo needs (~2)
NK = "dot-weight-to-nk"
TIE = 0.02                  # `weights_nk` is taken unless priced this much dearer


def relayout(graph: Graph, rules: Sequence[Rule]) -> tuple[Graph, list[str]] | None:
    """(graph with its NCHW convs in NHWC and transposes sunk, rule names applied), or
    None when `rules` lack `conv-to-nhwc` or the graph has no NCHW conv. The last
    graph's answer is kept: `hlo_opt.jit` relays a graph to choose its compile options
    (`pipeline.probe`), then its search relays the same graph (0.06-0.3 s on the zoo's
    CNNs, every time)."""
    by_name = {r.name: r for r in rules}
    if not all(name in by_name for name in TO_NHWC):
        return None
    to_nhwc = [by_name[n] for n in TO_NHWC]
    sink = [by_name[n] for n in SINK if n in by_name]
    key = (graph.digest, *to_nhwc, *sink)       # (holds the rules: no id is reused)
    if _last[:1] != [key]:
        _last[:] = [key, _relayout(graph, to_nhwc, sink)]
    found = _last[1]
    return None if found is None else (found[0], list(found[1]))


_last: list = []            # [key, relayout's answer] for the last graph relaid


def _relayout(graph, to_nhwc, sink):
    converted, applied = saturate(graph, to_nhwc)
    if not applied:
        return None
    done, more = saturate(converted, sink, MAX_STEPS_PER_NODE * len(graph.nodes))
    return done, applied + more


def weights_nk(graph: Graph, rules: Sequence[Rule], fixed) -> tuple[Graph, list[str]] | None:
    """(graph with every matmul whose 2-D weight is computed from the `fixed` inputs
    alone reading it N x K, rule names applied), or None when there is none (or `rules`
    lack `dot-weight-to-nk`)."""
    rule, found = frozen_kn(graph, rules, fixed)
    if not found:
        return None
    new, taken = rule.apply_all(graph, found)
    return (new, [NK] * taken) if taken else None


def finishes(graph: Graph, rules: Sequence[Rule], fixed) -> bool:
    """Whether `weights_nk` has matmuls to turn in `graph`: the search then holds back
    the time to price that move."""
    return bool(frozen_kn(graph, rules, fixed)[1])


def frozen_kn(graph, rules, fixed) -> tuple[Rule | None, list[Match]]:
    """(`dot-weight-to-nk` of `rules` or None, its matches whose weight is computed
    from the `fixed` inputs alone)."""
    rule = next((r for r in rules if r.name == NK), None)
    if rule is None or not fixed:
        return rule, []
    frozen = weight_only(graph, fixed)
    return rule, [m for m in rule.matches(graph) if m.roots[0].node.inputs[1].node in frozen]


def saturate(graph: Graph, rules: Sequence[Rule], max_steps: int | None = None,
             only: Callable[[Graph], Callable[[Match], bool]] | None = None
             ) -> tuple[Graph, list[str]]:
    """Apply `rules` until none matches (or `max_steps`), in rounds: each round applies
    each rule at all the matches it can take at once (`Rule.apply_all`); with `only`,
    at those that `only(graph)` keeps."""
    applied: list[str] = []
    changed = True
    while changed and (max_steps is None or len(applied) < max_steps):
        changed = False
        for rule in rules:
            found = rule.matches(graph)
            if only is not None and found:
                found = list(filter(only(graph), found))
            new, taken = rule.apply_all(graph, found)
            if taken and new.digest != graph.digest:
                graph = new
                applied += [rule.name] * taken
                changed = True
    return graph, applied
