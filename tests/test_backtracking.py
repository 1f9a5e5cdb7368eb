"""Backtracking's queue: greedy keeps stepping from each graph it improves to, each step
gaining what it is asked."""
import jax.numpy as jnp
import numpy as np

from hlo_opt import capture, rules
from hlo_opt.search import search
from hlo_opt.search.backtracking import backtrack
from hlo_opt.search.core import Limits, Priced

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


def test_a_step_must_gain_the_asked_fraction():
    g = capture.capture(lambda x: -(-(jnp.tanh(x.T.T))),
                        (jnp.asarray(R.standard_normal((3, 4)), jnp.float32),)).graph

    def run(gain):
        limits = Limits(None, None)
        return backtrack(g, rules.ALL, Priced(_nodes, limits), limits, alpha=1.0,
                         max_nodes=100, gain=gain)
    assert run(0.5).applied == []                     # each step saves 2 of 6 nodes
    assert sorted(run(0.3).applied) == ["neg-neg", "transpose-cancel"]


def test_greedy_search_steps_gain_step_gain():
    g = capture.capture(lambda x: -(-(jnp.tanh(x.T.T))),
                        (jnp.asarray(R.standard_normal((3, 4)), jnp.float32),)).graph
    kw = dict(algorithm="greedy", split_threshold=None, time_limit=None, budget=300,
              layouts=False)
    assert search(g, rules.ALL, _nodes, step_gain=0.5, **kw).applied == []
    assert len(search(g, rules.ALL, _nodes, step_gain=0.3, **kw).applied) == 2
