"""Sampling search (OCGGS Algorithm 3): polynomial time on large graphs.

Each round draws `q` moves at random from all the moves out of the current graphs (at
most `q` of them) and costs them; a move that lowers the cost of the graph it left is
kept. A move that does not is followed by up to `eta` more random moves, so sequences
that go up in cost before they come down (enlarge, then merge) are still found. The
round's best `q` improvements are the next round's graphs; a round costs at most
`q * (1 + eta)` graphs, and when it finds no improvement the search stops (saturated,
for its samples). A follow-up move is drawn by `core.any_option`: a rule among those
that match, then one of its moves; not one of all the moves, which took matching every
rule on the candidate (a third of the sampling's time) and drew a rule as often as it
matched, a rule of forty matches forty times as often as one of a single match.

A move counts as an improvement only when it lowers the cost of the graph it left by
`gain` (a fraction): under measured prices half the improvements a sampling search took
were under 0.6% of the part's cost, a fifth under 0.1% — kernel timings' noise, not
gains — and each kept the rounds going. On Inception-v3's scaling configs (1 and 4 C
blocks, 3 seeds each, one warm cache) asking 0.5% took 0.56-0.93x the seconds and
0.40-0.88x the graphs, and found graphs priced 0.3% cheaper to 0.7% dearer (a session
script, `/tmp/s33/gains.py`, not kept).
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from hlo_opt.ir import Graph
from hlo_opt.rules.lang import Rule
from hlo_opt.search.core import SATURATED, Limits, Priced, Result, any_option, options, step


def _apply(rule, at, graph, max_nodes):
    """(names, graph) of the move, or ([], None)."""
    return step(graph, rule, at, max_nodes) or ([], None)


def sample(graph: Graph, rules: Sequence[Rule], cost: Priced, limits: Limits, *,
           q: int = 20, eta: int = 1, max_nodes: int, seed: int = 0, gain: float = 0.0,
           progress=None) -> Result:
    rng = random.Random(seed)
    best = (cost(graph), graph, [])
    frontier = [best]
    seen = {graph.digest}
    reason = None
    while not (reason := limits.reason()):
        pool = [(c, g, p, rule, m) for c, g, p in frontier
                for rule, m in options(g, rules, limits)]
        improved = []
        for base, g, path, rule, m in rng.sample(pool, min(q, len(pool))):
            steps, current = _apply(rule, m, g, max_nodes)
            for depth in range(eta + 1):
                if current is None or current.digest in seen:
                    break
                seen.add(current.digest)
                c = cost(current)
                if c < base * (1 - gain):
                    improved.append((c, current, path + steps))
                    break
                if depth == eta or (reason := limits.reason()):
                    break
                drawn = any_option(current, rules, rng, limits)
                if drawn is None:
                    break
                rule2, m2 = drawn
                more, current = _apply(rule2, m2, current, max_nodes)
                steps = steps + more
            if reason or (reason := limits.reason()):
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
    reason = reason or limits.reason()     # matching stopped at the limit: not saturated
    return Result(best[1], best[0], best[2], reason or SATURATED,
                  {"explored": len(seen), "costed": limits.costed})
