"""Cost-based backtracking (MetaFlow Algorithm 1, TASO Algorithm 2).

A priority queue of graphs, cheapest first. Each popped graph's moves are costed; a new
graph joins the queue when it costs less than `alpha` times the best so far, so with
alpha > 1 the search may pass through worse graphs to reach better ones (enlarge a
kernel, then merge); alpha = 1 is greedy. Graphs are deduplicated by structural hash.

With `gain`, a graph must cost that fraction less than the bar to count (alpha = 1: to be
taken at all), as the sampling's steps must (`sampling.py`); with `where`, only the
matches it keeps are moves (the pass across a split's cuts: `split.spans`).
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from hlo_opt.ir import Graph
from hlo_opt.rules.lang import Rule
from hlo_opt.search.core import SATURATED, Limits, Priced, Result, moves


def backtrack(graph: Graph, rules: Sequence[Rule], cost: Priced, limits: Limits, *,
              alpha: float, max_nodes: int, gain: float = 0.0, where=None,
              progress=None) -> Result:
    order = itertools.count()
    start = cost(graph)
    best = (start, graph, [], [start])           # cost, graph, rules applied, path costs
    queue = [(start, next(order), graph, [], [start])]
    seen = {graph.digest}
    reason = None
    while queue and not (reason := limits.reason()):
        _, _, current, path, costs = heapq.heappop(queue)
        for names, new in moves(current, rules, max_nodes, limits, where):
            if new.digest in seen:
                continue
            seen.add(new.digest)
            c = cost(new)
            # Against the best before this graph (TASO admits, then updates the best on
            # the pop): compared after the update, a new best was never below 1 x
            # itself, and greedy stopped after its first improving step.
            if c < alpha * best[0] * (1 - gain):
                heapq.heappush(queue, (c, next(order), new, path + names, costs + [c]))
            if c < best[0] * (1 - gain):
                best = (c, new, path + names, costs + [c])
                if progress:
                    progress(best[0], limits)
            if (reason := limits.reason()):
                break
    # The queue can run dry because matching stopped at the limit: that is no saturation.
    reason = reason or limits.reason()
    return Result(best[1], best[0], best[2], reason or SATURATED,
                  {"explored": len(seen), "costed": limits.costed, "queue_left": len(queue),
                   "path_costs": best[3]})
