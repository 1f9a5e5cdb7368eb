"""The regrouping move: a family of like grouped convs split into dense pieces, the form
chosen by price; the answers stay those of jax.jit of the original."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from hlo_opt import capture, emit, rules
from hlo_opt.search import groups, search
from helpers import assert_close

R = np.random.default_rng(11)
CONV = "conv_general_dilated"


def _rand(*shape):
    return jnp.asarray(R.standard_normal(shape), jnp.float32)


def _convs(graph):
    return [n for n in graph.nodes if n.op == CONV]


def _resnext():
    fn, params, (x,) = models.build("resnext50", small=True)
    return fn, (params, x), capture.capture(fn, (params, x)).graph


@pytest.mark.parametrize("halvings", [0, 1, 3])
def test_a_family_becomes_2_to_the_j_dense_convs(halvings):
    fn, args, g = _resnext()
    family = groups.families(g, list(rules.ALL))[1]        # stage 2: 64 channels, 8 groups
    new, applied = groups.regroup(g, list(rules.ALL), family, halvings)
    members = [n for n in _convs(g) if groups.signature(n) == family]
    pieces = 2 ** halvings
    assert len(_convs(new)) == len(_convs(g)) + len(members) * (pieces - 1)
    assert applied.count("grouped-conv-halve") == len(members) * (pieces - 1)
    # the pieces: dense 3x3 convs on 64 / pieces of the channels, no other conv changed
    dense = [n for n in _convs(new) if n.params["feature_group_count"] == 1
             and n.inputs[1].type.shape == (64 // pieces, 64 // pieces, 3, 3)
             and n.inputs[0].type.shape[1] == 64 // pieces]
    assert len(dense) == len(members) * pieces
    if halvings:         # each piece reads one slice of the conv's input, not a chain
        assert all(n.inputs[0].node.op == "slice" and
                   n.inputs[0].node.inputs[0].node.op != "slice" for n in dense)
    assert sorted(map(groups.signature, _convs(g)), key=str).count(family) == len(members)
    assert family not in map(groups.signature, _convs(new))
    assert_close(emit.run(new, jax.tree.leaves(args)), [jax.jit(fn)(*args)], 1e-5)


def test_forms_run_from_the_most_pieces_to_one():
    _, _, g = _resnext()
    family = groups.families(g, list(rules.ALL))[0]         # 8 groups: 8, 4, 2, 1 pieces
    members = sum(groups.signature(n) == family for n in _convs(g))
    added = [len(_convs(groups.regroup(g, list(rules.ALL), family, j)[0])) - len(_convs(g))
             for j in groups.halvings(family)]
    assert members == 2 and added == [2 * 7, 2 * 3, 2 * 1, 0]


def test_cheapest_stops_before_making_a_form_past_the_limit(monkeypatch):
    """A form takes up to a second to make on ResNeXt-50: the limit is read before each
    is made, not after (the split searches ran 0.7 s past their 10 s)."""
    _, _, g = _resnext()
    made, priced = [], []
    real = groups.regroup
    monkeypatch.setattr(groups, "regroup", lambda *a: made.append(a[3]) or real(*a))

    def price(graph):
        priced.append(graph.digest)
        return _grouped_dear(graph)
    new, _ = groups.cheapest(g, list(rules.ALL), price, stop=lambda: len(priced) >= 2)
    assert made == [3]                   # one form made and priced against the original
    assert _grouped_dear(new) < _grouped_dear(g)


def test_depthwise_convs_are_no_family():
    def depthwise(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=8)
    g = capture.capture(depthwise, (_rand(1, 8, 6, 6), _rand(8, 1, 3, 3))).graph
    assert groups.families(g, list(rules.ALL)) == []
    grouped = capture.capture(depthwise, (_rand(1, 16, 6, 6), _rand(8, 2, 3, 3))).graph
    assert len(groups.families(grouped, list(rules.ALL))) == 1


def _grouped_dear(graph):
    """A price under which a grouped conv is dear, any conv costs, and every node a
    little: each family's cheapest form is one dense conv."""
    return sum(10.0 if n.params["feature_group_count"] > 1 else 1.0 for n in _convs(graph)) \
        + 1e-3 * len(graph.nodes)


def test_cheapest_takes_each_family_to_its_cheapest_form():
    fn, args, g = _resnext()
    new, applied = groups.cheapest(g, list(rules.ALL), _grouped_dear)
    # no grouped conv is left, and each family took one dense conv
    assert all(n.params["feature_group_count"] == 1 for n in _convs(new))
    assert len(_convs(new)) == len(_convs(g))
    assert "grouped-conv-halve" not in applied
    assert_close(emit.run(new, jax.tree.leaves(args)), [jax.jit(fn)(*args)], 1e-5)


def _priced_by_nodes(g):
    """`cheapest` under a price where more nodes cost more (no form pays): (graph,
    rules applied, the graphs priced)."""
    priced = []

    def nodes(graph):
        priced.append(graph)
        return float(len(graph.nodes))
    new, applied = groups.cheapest(g, list(rules.ALL), nodes)
    return new, applied, priced


def test_a_family_stops_pricing_at_the_first_form_well_above_the_best():
    _, _, g = _resnext()
    new, applied, priced = _priced_by_nodes(g)
    assert new is g and applied == []
    # per family: the graph and its first form (8 pieces), then the next family
    families = len(groups.families(g, list(rules.ALL)))
    assert len({h.digest for h in priced}) == 1 + families


def test_the_search_splits_grouped_convs_when_the_price_says_so():
    fn, args, g = _resnext()
    r = search(g, rules.ALL, _grouped_dear, algorithm="greedy", split_threshold=20,
               time_limit=None, budget=400)
    assert "grouped-conv-to-dense" in r.applied
    assert not any(n.params["feature_group_count"] > 1 for n in _convs(r.graph))
    assert_close(emit.run(r.graph, jax.tree.leaves(args)), [jax.jit(fn)(*args)], 1e-5)


# -- dots: a family of like dots as 2^j dots on column slices of the weight -----------------

def _projections():
    """Two projections of a sequence by 256x256 weights (one family), a 256x2 classifier
    (too narrow to split into pieces of `MIN_COLUMNS`)."""
    def fn(x, a, b, c):
        h = jnp.tanh(x @ a) * jax.nn.sigmoid(x @ b)
        return h[:, -1] @ c
    args = (_rand(1, 8, 256), _rand(256, 256), _rand(256, 256), _rand(256, 2))
    return fn, args, capture.capture(fn, args).graph


def _dots(graph):
    return [n for n in graph.nodes if n.op == "dot_general"]


@pytest.mark.parametrize("halvings", [1, 2])
def test_a_family_of_dots_becomes_2_to_the_j_pieces(halvings):
    fn, args, g = _projections()
    [family] = groups.families(g, list(rules.ALL), groups.DOTS)
    assert list(groups.halvings(family, groups.DOTS)) == [1, 2]    # 128 and 64 columns
    new, applied = groups.regroup(g, list(rules.ALL), family, halvings, groups.DOTS)
    pieces = 2 ** halvings
    assert applied.count("dot-halve-columns") == 2 * (pieces - 1)
    assert len(_dots(new)) == 1 + 2 * pieces
    # each piece reads one slice of its weight, not a chain
    cut = [n for n in _dots(new) if n.inputs[1].type.shape == (256, 256 // pieces)]
    assert len(cut) == 2 * pieces and all(n.inputs[1].node.op == "slice" and
                                          n.inputs[1].node.inputs[0].node.op == "input"
                                          for n in cut)
    assert_close(emit.run(new, list(args)), [jax.jit(fn)(*args)], 1e-5)


def test_dots_are_priced_from_the_fewest_pieces_up():
    _, _, g = _projections()
    new, applied, priced = _priced_by_nodes(g)
    assert new is g and applied == []
    two = groups.regroup(g, list(rules.ALL), groups.families(g, list(rules.ALL), groups.DOTS)[0],
                         1, groups.DOTS)[0]
    assert {h.digest for h in priced} == {g.digest, two.digest}   # 4 pieces never made


def test_the_search_splits_dots_when_the_price_says_so():
    fn, args, g = _projections()

    def wide_dear(graph):                # the more columns, the dearer a column
        return sum({256: 10.0, 128: 3.0}.get(n.inputs[1].type.shape[-1], 1.0)
                   for n in _dots(graph)) + 1e-3 * len(graph.nodes)
    r = search(g, rules.ALL, wide_dear, algorithm="greedy", split_threshold=5,
               time_limit=None, budget=200)
    assert r.applied.count("dot-halve-columns") == 2 * 3
    assert not any(n.inputs[1].type.shape[-1] > 64 for n in _dots(r.graph)
                   if n.inputs[1].type.shape[-1] != 2)
    assert_close(emit.run(r.graph, list(args)), [jax.jit(fn)(*args)], 1e-5)
