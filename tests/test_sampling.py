"""The sampling search (OCGGS Algorithm 3): its step gain and how it draws a follow-up
move."""
import collections
import random

import jax.numpy as jnp
import numpy as np
import pytest

from hlo_opt import capture, rules
from hlo_opt.rules.library import concat_split
from hlo_opt.search import search
from hlo_opt.search.core import Everywhere, any_option, options

R = np.random.default_rng(3)


def _rand(*shape):
    return jnp.asarray(R.standard_normal(shape), jnp.float32)


def _ops(graph):
    return collections.Counter(n.op for n in graph.nodes)


@pytest.mark.parametrize("saved, taken", [(0.1, False), (2.0, True)])
def test_a_sampling_step_must_gain_step_gain(saved, taken):
    """Merging two dots that share an input saves `saved` of a cost near 100: 0.1% is
    under the default step gain of 0.5% and is not taken; 2% is. Asked no gain, the
    sampling takes even 0.1%."""
    g = capture.capture(lambda x, a, b: (jnp.tanh(x @ a), jnp.tanh(x @ b)),
                        (_rand(2, 3), _rand(3, 4), _rand(3, 4))).graph
    merge = [concat_split.RULES["merge-dots-shared-lhs"]]

    def price(h):
        return 100.0 + saved * _ops(h)["dot_general"]
    kw = dict(algorithm="sampling", split_threshold=None, time_limit=None, budget=50,
              layouts=False)
    assert _ops(search(g, merge, price, **kw).graph)["dot_general"] == (1 if taken else 2)
    assert _ops(search(g, merge, price, step_gain=0.0, **kw).graph)["dot_general"] == 1


def _key(rule, at):
    """A move by its rule, the nodes and roots of each match, and whether it is one."""
    def one(m):
        return frozenset(m.nodes), tuple(m.roots)
    return rule.name, isinstance(at, Everywhere), \
        frozenset(map(one, at)) if isinstance(at, Everywhere) else one(at)


def test_a_drawn_move_is_one_of_the_graphs_moves_and_every_matching_rule_is_drawn():
    """`any_option` matches rules in a random order until one matches: what it draws is
    one of `options`' moves, each rule with moves comes up about as often as another
    (not as often as it has moves: 1 to 3 here), and a graph no rule matches draws
    nothing."""
    g = capture.capture(lambda x, a, b: (jnp.tanh(x @ a) + 0.0, jnp.exp(x @ b)),
                        (_rand(2, 3), _rand(3, 4), _rand(3, 4))).graph
    every = {_key(rule, at) for rule, at in options(g, rules.ALL)}
    rng = random.Random(0)
    drawn = [any_option(g, rules.ALL, rng) for _ in range(300)]
    assert all(_key(rule, at) in every for rule, at in drawn)
    names = collections.Counter(rule.name for rule, _ in drawn)
    assert set(names) == {key[0] for key in every}
    assert min(names.values()) > len(drawn) / len(names) / 2
    assert len({_key(rule, at) for rule, at in drawn}) > len({key[0] for key in every})
    none = capture.capture(lambda x: x, (_rand(2, 3),)).graph
    assert not list(options(none, rules.ALL)) and any_option(none, rules.ALL, rng) is None
