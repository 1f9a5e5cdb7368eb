"""The pass across a split's cuts: the matches it tries are those the parts' searches
could not see."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo_opt.search
from hlo_opt import capture, cost, deadline, rules
from hlo_opt.search import search
from hlo_opt.search import split as splitting
from hlo_opt.search.core import matches


def test_only_matches_across_a_cut_or_on_new_nodes_are_kept():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 4)), jnp.float32)
    g = capture.capture(lambda x: jnp.tanh(jnp.transpose(-(-(jnp.exp(x).T)))), (x,)).graph
    ops = [n for n in g.nodes if n.op != "input"]
    assert [n.op for n in ops] == ["exp", "transpose", "neg", "neg", "transpose", "tanh"]
    parts = splitting.cut(g, set(ops[:3]))             # the cut runs between the negs
    part_of = {n: 0 for n in parts.first.nodes} | {n: 1 for n in parts.second.nodes}
    whole = splitting.stitch(g, parts, parts.first, parts.second, part_of)
    across = splitting.spans(part_of)
    found = [(r.name, m) for r, m in matches(whole, rules.ALL)]
    kept = {name for name, m in found if across(m)}
    assert kept == {"neg-neg"}
    inside = {name for name, m in found if not across(m)}
    assert {"unary-through-transpose", "transpose-through-unary"} <= inside
    # After a rewrite, the nodes it rebuilt (the second transpose, tanh) are no part's:
    # their matches are tried, those across the cut now, and those on them alone.
    (m,) = [m for name, m in found if name == "neg-neg"]
    after = m.rule.apply(whole, m)
    kept = {r.name for r, m in matches(after, rules.ALL) if across(m)}
    assert kept == {"transpose-cancel", "transpose-fuse", "transpose-through-unary"}


def _one_conv_blocks(blocks: int = 8):
    """Residual blocks of one conv each (test_search's two-conv blocks are cut where no
    match spans); the graph and its number of arguments."""
    def f(x, *ws):
        for w in ws:
            x = jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME")) + x
        return x
    r_ = np.random.default_rng(1)
    args = [jnp.asarray(r_.standard_normal(s), jnp.float32)
            for s in [(1, 4, 8, 8)] + [(4, 4, 3, 3)] * blocks]
    return capture.capture(f, args).graph, len(args)


def test_the_split_search_passes_over_the_matches_across_its_cuts(monkeypatch):
    g, n_args = _one_conv_blocks()
    passes, real = [], hlo_opt.search.backtrack

    def spy(graph, rules_, cost, limits, **kw):
        passes.append((graph, kw))
        return real(graph, rules_, cost, limits, **kw)
    monkeypatch.setattr(hlo_opt.search, "backtrack", spy)
    model = cost.Analytic()
    r = search(g, rules.ALL, lambda h: model.cost(h, range(1, n_args)).total,
               algorithm="sampling", split_threshold=12, time_limit=30, budget=None)
    assert r.stats["parts"] >= 3
    ((whole, kw),) = passes                            # the parts are sampled
    assert kw["gain"] == 0.005
    found = [m for _, m in matches(whole, rules.ALL)]
    assert any(kw["where"](m) for m in found) and not all(kw["where"](m) for m in found)


def test_the_stitched_graph_is_priced_past_the_time_limit(monkeypatch):
    """The parts' gains reach the result only through the stitched graph: priced past
    the search's deadline, as the start is. Stopped there (priced at infinity) it would
    lose to the graph before the split, and every part's search would go for nothing."""
    g, n_args = _one_conv_blocks()
    model, now, stitched, real = cost.Analytic(), [0.0], [], splitting.stitch

    def stitch(*args):
        stitched.append(real(*args))
        return stitched[-1]
    monkeypatch.setattr(splitting, "stitch", stitch)

    def price(h):
        now[0] += 0.001
        if stitched and h.digest == stitched[-1].digest and len(h.inputs) == len(g.inputs):
            now[0] += 100.0          # its new kernels take the search past its limit
            deadline.check()
        return model.cost(h, range(1, n_args)).total
    r = search(g, rules.ALL, price, algorithm="sampling", split_threshold=12, time_limit=30,
               budget=None, clock=lambda: now[0])
    assert r.stats["parts"] >= 3 and now[0] > 100.0
    assert r.graph.digest == stitched[-1].digest and r.cost == price(stitched[-1])
    assert r.cost < r.stats["start_cost"] and not r.stats["stopped"]


@pytest.mark.parametrize("timed_whole", [False, True])
def test_a_graph_timed_whole_is_searched_whole(timed_whole):
    # Parts priced as programs of their own do not price a program timed whole: with
    # `timed_whole`, every graph priced is the whole program (its inputs and outputs).
    g, n_args = _one_conv_blocks()
    model, priced = cost.Analytic(), []

    def price(h):
        priced.append((len(h.inputs), len(h.outputs)))
        return model.cost(h, range(1, n_args)).total
    r = search(g, rules.ALL, price, algorithm="sampling", split_threshold=12, time_limit=30,
               budget=None, timed_whole=timed_whole)
    whole = (len(g.inputs), len(g.outputs))
    assert (r.stats["parts"] == 1) == timed_whole
    assert (set(priced) == {whole}) == timed_whole
