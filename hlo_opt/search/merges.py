"""The merge move: every group of dots that share their left operand merged at once
(TASO's merged matmul, taken for the whole graph as one macro move).

`merge-dots-shared-lhs` merges two dots; eight dots that read the same `h` (NasRNN's
gates) take three rounds of pairwise merges, and the first round alone gains little:
measured on the 2-core CPU, NasRNN's whole-program time moved 1.24 -> 1.12 ms after
the first round, 0.72 ms after the second and 0.64 ms after the third (flattening the
nested concats between rounds). A search that must see each round pay, on a cost that
reads a short program whole and so carries its timing noise, stops after the first
or never takes it. `merge_all` takes every round at once; the search prices the result
like any other graph and starts from it only when it is cheaper. Every step is a
verified rule, so the result is an equivalent graph.
"""
from __future__ import annotations

from collections.abc import Sequence

from hlo_opt.ir import Graph
from hlo_opt.rules.lang import Rule
from hlo_opt.search.layout import saturate

MERGE = ("merge-dots-shared-lhs", "concat-flatten")
MAX_STEPS_PER_NODE = 2      # a bound on saturation: each merge removes a dot, each flatten a concat


def merge_all(graph: Graph, rules: Sequence[Rule], max_nodes: int
              ) -> tuple[Graph, list[str]] | None:
    """(graph with every shared-operand dot group merged, rule names applied), or None
    when `rules` lack the merge, nothing merges, or the result exceeds `max_nodes`."""
    by_name = {r.name: r for r in rules}
    if MERGE[0] not in by_name:
        return None
    merged, applied = saturate(graph, [by_name[n] for n in MERGE if n in by_name],
                               MAX_STEPS_PER_NODE * len(graph.nodes))
    if not applied or len(merged.nodes) > max_nodes:
        return None
    return merged, applied
