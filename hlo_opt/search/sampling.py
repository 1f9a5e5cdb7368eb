"""Sampling search (OCGGS Algorithm 3): polynomial time on large graphs.

Each round keeps up to `q` graphs. From each, `q` moves are drawn at random and costed;
a move that lowers the cost is kept. A move that does not is explored `eta` moves
further (again `q` random moves each), so sequences that go up in cost before they come
down (enlarge, then merge) are still found. The round's best `q` improvements are the
next round's graphs; when a round finds none, the search is saturated (for its samples).
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from hlo_opt.ir import Graph
from hlo_opt.rules.lang import Rule
from hlo_opt.search.core import SATURATED, Limits, Priced, Result, matches


def _sample_moves(graph: Graph, rules: Sequence[Rule], q: int, max_nodes: int,
                  rng: random.Random):
    found = list(matches(graph, rules))
    for rule, m in rng.sample(found, min(q, len(found))):
        new = rule.apply(graph, m)
        if new is not None and len(new.nodes) <= max_nodes:
            yield rule.name, new


def sample(graph: Graph, rules: Sequence[Rule], cost: Priced, limits: Limits, *,
           q: int = 20, eta: int = 1, max_nodes: int, seed: int = 0, progress=None) -> Result:
    rng = random.Random(seed)
    best = (cost(graph), graph, [])
    frontier = [best]
    seen = {graph.digest}
    reason = None
    while not (reason := limits.reason()):
        improved = []
        for base_cost, current, path in frontier:
            stack = [(current, path, 0)]
            while stack and not (reason := limits.reason()):
                g, p, depth = stack.pop()
                for name, new in _sample_moves(g, rules, q, max_nodes, rng):
                    if new.digest in seen:
                        continue
                    seen.add(new.digest)
                    c = cost(new)
                    if c < base_cost:
                        improved.append((c, new, p + [name]))
                    elif depth < eta:
                        stack.append((new, p + [name], depth + 1))
                    if (reason := limits.reason()):
                        break
        if improved:
            improved.sort(key=lambda t: t[0])
            frontier = improved[:q]
            if frontier[0][0] < best[0]:
                best = frontier[0]
                if progress:
                    progress(best[0], limits)
        if reason or not improved:
            break
    return Result(best[1], best[0], best[2], reason or SATURATED,
                  {"explored": len(seen), "costed": limits.costed})
