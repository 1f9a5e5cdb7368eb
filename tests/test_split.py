"""The pass across a split's cuts: the matches it tries are those the parts' searches
could not see."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import hlo_opt.search
from hlo_opt import capture, cost, rules
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


def test_the_split_search_passes_over_the_matches_across_its_cuts(monkeypatch):
    # One conv per block: test_search's two-conv blocks are cut where no match spans.
    def f(x, *ws):
        for w in ws:
            x = jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME")) + x
        return x
    r_ = np.random.default_rng(1)
    args = [jnp.asarray(r_.standard_normal(s), jnp.float32)
            for s in [(1, 4, 8, 8)] + [(4, 4, 3, 3)] * 8]
    g = capture.capture(f, args).graph
    passes, real = [], hlo_opt.search.backtrack

    def spy(graph, rules_, cost, limits, **kw):
        passes.append((graph, kw))
        return real(graph, rules_, cost, limits, **kw)
    monkeypatch.setattr(hlo_opt.search, "backtrack", spy)
    model = cost.Analytic()
    r = search(g, rules.ALL, lambda h: model.cost(h, range(1, len(args))).total,
               algorithm="sampling", split_threshold=12, time_limit=30, budget=None)
    assert r.stats["parts"] >= 3
    ((whole, kw),) = passes                            # the parts are sampled
    assert kw["gain"] == 0.005
    found = [m for _, m in matches(whole, rules.ALL)]
    assert any(kw["where"](m) for m in found) and not all(kw["where"](m) for m in found)
