"""The layout move: every NCHW conv of a network to NHWC at once, the transposes
between convs cancelled (`search.layout`), and the one-pass rewrite it is built on
(`Rule.apply_all`, `ir.replace`)."""
import collections
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from hlo_opt import capture, emit, ir, ops, rules
from hlo_opt.rules.library import layout as L
from hlo_opt.search import layout, search
from hlo_opt.search import matched_alone as search_moves
from helpers import assert_close

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import models  # noqa: E402

R = np.random.default_rng(5)


def _rand(*shape):
    return jnp.asarray(R.standard_normal(shape), jnp.float32)


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME")


def _chain(x, w1, w2, w3):
    return jax.nn.relu(_conv(jax.nn.relu(_conv(jax.nn.relu(_conv(x, w1)), w2)), w3))


CHAIN_ARGS = (_rand(1, 3, 8, 8), _rand(4, 3, 3, 3), _rand(4, 4, 1, 1), _rand(2, 4, 3, 3))


def _inner_transposes(graph):
    """Transposes inside the graph: not of an input (weights are free once frozen, the
    image's is unavoidable) nor giving an output (back to the caller's layout); any
    other is a copy between layouts."""
    outputs = {v.node for v in graph.outputs}
    return [n for n in graph.nodes if n.op == "transpose" and n not in outputs
            and n.inputs[0].node.op != "input"]


def test_apply_all_equals_applying_one_match_at_a_time():
    g = capture.capture(_chain, CHAIN_ARGS).graph
    for name in ("conv-to-nhwc", "conv-kernel-to-hwio"):
        rule = L.RULES[name]
        at_once, taken = rule.apply_all(g, rule.matches(g))
        one_by_one = g
        while (found := rule.matches(one_by_one)):
            one_by_one = rule.apply(one_by_one, found[0])
        assert taken == 3
        assert at_once.digest == one_by_one.digest


def test_replace_redirects_reads_of_replaced_values_and_refuses_a_cycle():
    g = capture.capture(lambda x: jnp.tanh(jnp.exp(x)), [np.ones(3, np.float32)]).graph
    exp, tanh = [n for n in g.nodes if n.op != "input"]
    # tanh's image reads exp's value; exp's value is replaced too: the image must read
    # exp's image, and nothing of the old exp may survive.
    new_exp = ops.make("sin", [exp.inputs[0]]).out()
    new_tanh = ops.make("cos", [exp.out()]).out()
    out = ir.replace(g, {exp.out(): new_exp, tanh.out(): new_tanh})
    assert [n.op for n in out.nodes if n.op != "input"] == ["sin", "cos"]
    assert out.outputs[0].node.inputs[0].node.op == "sin"
    looped = ops.make("cos", [tanh.out()]).out()       # exp := cos(tanh(exp(..)))
    with pytest.raises(ir.GraphError):
        ir.replace(g, {exp.out(): looped})


@pytest.mark.parametrize("name", ["resnet50", "inception_v3", "squeezenet", "nasnet_a"])
def test_relayout_leaves_no_transpose_between_convs_and_keeps_the_answer(name):
    fn, params, inputs = models.build(name, small=True)
    g = capture.capture(fn, (params,) + tuple(inputs)).graph
    assert _inner_transposes(g) == []
    new, applied = layout.relayout(g, list(rules.ALL))
    counts = collections.Counter(n.op for n in new.nodes)
    convs = [n for n in new.nodes if n.op == "conv_general_dilated"]
    assert convs and all(n.params["dimension_numbers"] == L.NHWC for n in convs)
    assert _inner_transposes(new) == []
    assert counts["conv_general_dilated"] == applied.count("conv-to-nhwc")
    leaves = jax.tree_util.tree_leaves((params,) + tuple(inputs))
    assert_close(emit.run(new, leaves), emit.run(g, leaves), 1e-4, name)


class _Counted:
    """A rule that counts the times its matches are asked for: one per round of
    `layout.saturate`."""

    def __init__(self, rule):
        self.rule, self.name, self.calls = rule, rule.name, 0

    def matches(self, graph):
        self.calls += 1
        return self.rule.matches(graph)

    def apply_all(self, graph, found):
        return self.rule.apply_all(graph, found)


def _rounds(blocks, one_sided=True):
    """(relaid graph, sink rounds) of a ResNet stage of `blocks` blocks."""
    fn, params, inputs = models.build("resnet50", small=True, blocks=(blocks, 0, 0, 0))
    g = capture.capture(fn, (params,) + tuple(inputs)).graph
    counted = _Counted(L.RULES["transpose-cancel"])
    chosen = [counted if r.name == counted.name else r for r in rules.ALL
              if one_sided or r.name not in layout.NCHW_ONE_SIDED]
    return layout.relayout(g, chosen)[0], counted.calls


def test_relayout_sinks_a_residual_stream_in_rounds_its_depth_does_not_set():
    # A transpose passes an add once both operands carry one, so with the two-sided
    # rule alone block i+1's add waited for block i's relu: a round per block. The
    # one-sided sinks move every block's transpose in the same round, to the same graph.
    short, deep = _rounds(2), _rounds(8)
    assert deep[1] == short[1] <= 6
    alone = _rounds(8, one_sided=False)
    assert alone[0].digest == deep[0].digest
    assert alone[1] >= 8 + short[1] - 2


def test_the_one_sided_sinks_take_only_an_nchw_transpose_whose_other_operand_has_none():
    x, y = _rand(1, 4, 4, 3), _rand(1, 3, 4, 4)
    lhs, rhs = (L.RULES[n] for n in layout.NCHW_ONE_SIDED)
    to_nchw = lambda v: jnp.transpose(v, L.TO_NCHW)  # noqa: E731
    one = capture.capture(lambda x, y: to_nchw(x) - y, (x, y)).graph
    assert len(lhs.matches(one)) == 1 and rhs.matches(one) == []
    new = lhs.apply(one, lhs.matches(one)[0])
    assert_close(emit.run(new, [x, y]), emit.run(one, [x, y]), 1e-6, "lhs")
    both = capture.capture(lambda x, z: to_nchw(x) - to_nchw(z), (x, x)).graph
    assert lhs.matches(both) == [] == rhs.matches(both)          # the two-sided rule's
    other = capture.capture(lambda x, y: jnp.transpose(x, (0, 2, 3, 1)) * y,
                            (_rand(1, 3, 4, 4), _rand(1, 4, 4, 3))).graph
    assert lhs.matches(other) == [] == rhs.matches(other)        # not its permutation
    assert not set(layout.NCHW_ONE_SIDED) & {r.name for r in search_moves(rules.ALL)}


def test_relayout_remembers_the_last_graph_it_relaid():
    g = capture.capture(_chain, CHAIN_ARGS).graph
    counted = _Counted(L.RULES["conv-to-nhwc"])
    chosen = [counted if r.name == counted.name else r for r in rules.ALL]
    first = layout.relayout(g, chosen)
    calls = counted.calls
    again = layout.relayout(g, chosen)
    assert counted.calls == calls and again[0] is first[0] and again[1] == first[1]
    again[1].append("mine")                            # each caller gets its own list
    assert layout.relayout(g, chosen)[1] == first[1]
    other = layout.relayout(g, list(rules.ALL))        # other rules: relaid anew
    assert other[0].digest == first[0].digest and counted.calls == calls


def test_relayout_needs_the_conv_rule_and_an_nchw_conv():
    g = capture.capture(_chain, CHAIN_ARGS).graph
    assert layout.relayout(g, [r for r in rules.ALL if r.name != "conv-to-nhwc"]) is None
    nhwc = capture.capture(lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
        (_rand(1, 8, 8, 3), _rand(3, 3, 3, 4))).graph
    assert layout.relayout(nhwc, list(rules.ALL)) is None


def _nchw_penalty(graph):
    """A cost where an NCHW conv costs its transposes (XLA CPU's copies around an NHWC
    kernel) and every transpose of a non-input is a copy."""
    total = 0.0
    for n in graph.nodes:
        if n.op == "conv_general_dilated":
            total += 1.0 if n.params["dimension_numbers"] == L.NHWC else 1.6
        elif n.op == "transpose":
            total += 0.0 if n.inputs[0].node.op == "input" else 0.3
        elif n.op != "input":
            total += 0.05
    return total


@pytest.mark.parametrize("layouts", [True, False])
def test_search_starts_from_the_relaid_graph_only_when_asked_and_cheaper(layouts):
    g = capture.capture(_chain, CHAIN_ARGS).graph
    r = search(g, list(rules.ALL), _nchw_penalty, algorithm="greedy", budget=5,
               time_limit=None, layouts=layouts)
    if layouts:
        assert r.applied.count("conv-to-nhwc") == 3 and r.stats["relaid"] < r.stats["start_cost"]
        assert _inner_transposes(r.graph) == []
    else:
        assert "relaid" in r.stats and r.stats["relaid"] is None
    assert_close(emit.run(r.graph, CHAIN_ARGS), emit.run(g, CHAIN_ARGS), 1e-5)


def test_search_keeps_the_original_when_the_relaid_graph_costs_more():
    g = capture.capture(_chain, CHAIN_ARGS).graph
    r = search(g, list(rules.ALL), lambda h: len(h.nodes), algorithm="greedy", budget=5,
               time_limit=None)
    assert r.stats["relaid"] > r.stats["start_cost"]
    assert "conv-to-nhwc" not in r.applied


def _nhwc_pays_later(graph):
    """NHWC convs cost a little more than NCHW ones, but a 1x1 one becomes a cheap dot
    (`conv1x1-as-dot`, NHWC only): the relaid graph is worse, and pays after a move."""
    total = 0.0
    for n in graph.nodes:
        if n.op == "conv_general_dilated":
            total += 1.1 if n.params["dimension_numbers"] == L.NHWC else 1.0
        elif n.op == "dot_general":
            total += 0.1
        elif n.op == "transpose":
            total += 0.0 if n.inputs[0].node.op == "input" else 0.05
        elif n.op != "input":
            total += 0.01
    return total


@pytest.mark.parametrize("algorithm", ["sampling", "greedy"])
def test_a_worse_relaid_graph_within_alpha_is_searched_on_but_not_by_greedy(algorithm):
    g = capture.capture(_chain, CHAIN_ARGS).graph
    r = search(g, list(rules.ALL), _nhwc_pays_later, algorithm=algorithm, alpha=1.3,
               budget=200, time_limit=None)
    assert r.stats["start_cost"] < r.stats["relaid"] < 1.3 * r.stats["start_cost"]
    if algorithm == "greedy":
        assert "conv-to-nhwc" not in r.applied and r.cost == r.stats["start_cost"]
    else:
        assert "conv1x1-as-dot" in r.applied and r.cost < r.stats["start_cost"]
    assert_close(emit.run(r.graph, CHAIN_ARGS), emit.run(g, CHAIN_ARGS), 1e-5)


# -- frozen matmul weights read N x K ---------------------------------------------------------

def _mlp(x, w1, w2, h):
    """Two frozen weights (w1, w2) and a dot on an argument that is not frozen (h)."""
    return jnp.tanh(jnp.tanh(x @ w1) @ w2) @ h


MLP_ARGS = (_rand(1, 4, 16), _rand(16, 32), _rand(32, 16), _rand(16, 8))
MLP_FROZEN = (1, 2)


def _dot_weights(graph):
    return [n.inputs[1].node.op for n in graph.nodes if n.op == "dot_general"]


def test_weights_nk_moves_every_frozen_weight_and_no_other():
    g = capture.capture(_mlp, MLP_ARGS).graph
    new, applied = layout.weights_nk(g, rules.ALL, MLP_FROZEN)
    assert applied == [layout.NK] * 2
    assert _dot_weights(g) == ["input"] * 3
    assert _dot_weights(new) == ["transpose", "transpose", "input"]
    assert all(n.params["dimension_numbers"][0][1] == (1,) for n in new.nodes
               if n.op == "dot_general" and n.inputs[1].node.op == "transpose")
    assert_close(emit.run(new, list(MLP_ARGS)), [jax.jit(_mlp)(*MLP_ARGS)], 1e-5)
    assert layout.weights_nk(g, rules.ALL, ()) is None


def _busy(x, w1, w2, h):          # commuting adds and muls: moves for thousands of graphs
    y = x @ w1
    z = (jnp.tanh(y) + y) * (y + 1.0)
    return ((z @ w2) * 2.0 + 1.0) @ h


def test_the_finishing_move_is_priced_within_the_time_limit():
    """Its time is held back from the search: with every pricing one 'second' on the
    search's clock, the search and the move end by the limit (the move was priced one
    second past it: ResNeXt-50's backtracking split search read 10.3 s)."""
    g = capture.capture(_busy, MLP_ARGS).graph
    now = [0.0]

    def price(h):     # a node costs 1, a transpose nothing: the move is a tie
        now[0] += 1.0
        return float(len(h.nodes)) - sum(n.op == "transpose" for n in h.nodes)
    r = search(g, rules.ALL, price, algorithm="backtracking", alpha=1.5, time_limit=3.5,
               budget=None, split_threshold=None, fixed=MLP_FROZEN, clock=lambda: now[0])
    assert r.stop_reason == "time_limit"
    assert r.applied.count(layout.NK) == 2
    assert r.stats["seconds"] <= 3.5


def test_the_finishing_move_is_left_out_when_a_slow_step_spent_its_time():
    """A step slower than those before it (a candidate with kernels the cache had not met)
    spends the time held back for the move: the move is left out, not priced past the
    limit (ResNeXt-50's greedy split search: 12.1 s of 10)."""
    g = capture.capture(_busy, MLP_ARGS).graph
    now, steps = [0.0], iter([1.0, 1.0, 1.0, 3.4])

    def price(h):     # 'seconds' per pricing: 1, 1, 1, then 3.4, then 1 each
        now[0] += next(steps, 1.0)
        return float(len(h.nodes)) - sum(n.op == "transpose" for n in h.nodes)
    r = search(g, rules.ALL, price, algorithm="backtracking", alpha=1.5, time_limit=6.5,
               budget=None, split_threshold=None, fixed=MLP_FROZEN, clock=lambda: now[0])
    assert r.stop_reason == "time_limit" and r.stats["costed"] == 4
    assert layout.NK not in r.applied
    assert r.stats["seconds"] <= 6.5


@pytest.mark.parametrize("dearer, taken", [(1.0, True), (1.01, True), (1.05, False)])
def test_the_search_takes_weights_nk_unless_priced_dearer_than_the_tie(dearer, taken):
    """The move's gain is inside the kernel timings' drift: taken, at the end, unless
    priced more than `TIE` dearer; the search itself never takes it at one dot."""
    g = capture.capture(_mlp, MLP_ARGS).graph

    def price(h):     # a node costs 1, a transpose nothing, an N x K dot `dearer`
        nk = sum(n.op == "dot_general" and n.params["dimension_numbers"][0][1] == (1,)
                 for n in h.nodes)
        return float(len(h.nodes)) + 2.0 * nk * (dearer - 1.0) - sum(
            n.op == "transpose" for n in h.nodes)
    r = search(g, rules.ALL, price, algorithm="greedy", time_limit=None, budget=200,
               fixed=MLP_FROZEN)
    assert (r.applied.count(layout.NK) == 2) == taken
    assert r.applied.count(layout.NK) in (0, 2) and "dot-fold-rhs-transpose" not in r.applied
    assert r.stats["tie"] == taken
    assert_close(emit.run(r.graph, list(MLP_ARGS)), [jax.jit(_mlp)(*MLP_ARGS)], 1e-5)
