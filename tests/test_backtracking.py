"""Backtracking's queue: greedy keeps stepping from each graph it improves to."""
import jax.numpy as jnp
import numpy as np

from hlo_opt import capture, rules
from hlo_opt.search import search

R = np.random.default_rng(5)


def _nodes(graph):
    return float(len(graph.nodes))


def test_greedy_takes_improving_steps_of_different_rules_one_after_another():
    # neg-neg and transpose-cancel each remove two nodes; neither is one move with the
    # other, so the optimum is two steps away, each downhill.
    g = capture.capture(lambda x: -(-(jnp.tanh(x.T.T))),
                        (jnp.asarray(R.standard_normal((3, 4)), jnp.float32),)).graph
    r = search(g, rules.ALL, _nodes, algorithm="greedy", split_threshold=None,
               time_limit=None, budget=300, layouts=False)
    assert sorted(r.applied) == ["neg-neg", "transpose-cancel"]
    assert r.stats["path_costs"] == [_nodes(g), _nodes(g) - 2, _nodes(g) - 4]
