"""Sharing a whole-graph move's change of price among its matches' shapes
(`search.shares`), on hand-made kernels and on real graphs under the analytic cost."""
import collections
import types

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlo_opt import capture, cost, emit, rules
from hlo_opt.cost import Cost, KernelCost
from hlo_opt.cost.partition import Kernel
from hlo_opt.ir import Node, TensorType
from hlo_opt.params import Params
from hlo_opt.rules.lang import Built
from hlo_opt.search import everywhere, rewrite, shape_of, shares
from helpers import assert_close

R = np.random.default_rng(5)
T = TensorType((2,), np.dtype("float32"))


def _node(op="relu"):
    return Node(op, (), Params(), (T,))


def _cost(*kernels, total=None):
    """A Cost of (seconds, nodes) kernels; `total` their sum unless given."""
    made = tuple(KernelCost(Kernel(tuple(nodes), (), (), "loop"), s, False) for s, nodes in kernels)
    return Cost(sum(s for s, _ in kernels) if total is None else total, made)


def _match(shape, *nodes):
    return types.SimpleNamespace(shape=shape, nodes=set(nodes))


def _shape(m):
    return m.shape


def test_each_shape_gets_the_change_of_the_kernels_around_its_matches():
    """Before: a matched node fused with a consumer, an untouched kernel. After: the
    node built for the match, with the consumer rebuilt (an image); the node built for
    B rebuilt too (it read A's value), so found by its image; the untouched kernel as it
    was: the shape's change is after's kernels less before's, and the untouched kernel,
    in both, adds nothing."""
    a, use_a, b, c, far = (_node() for _ in range(5))
    a2, use_a2, b2, b2_rebuilt = _node(), _node(), _node(), _node()
    ma, mb = _match("A", a), _match("B", b)
    before = _cost((5.0, [a, use_a]), (2.0, [b]), (7.0, [c, far]))
    after = _cost((3.0, [a2, use_a2]), (4.0, [b2_rebuilt]), (7.0, [c, far]))
    built = Built([(ma, {a2}), (mb, {b2})], {use_a: use_a2, b2: b2_rebuilt})
    assert shares.by_shape(before, after, built, [ma, mb], _shape, 1e-9) == \
        {"A": -2.0, "B": 2.0}


def test_shapes_sharing_a_kernel_each_get_its_gain_and_an_untaken_match_is_left_out():
    """A and B read one producer p, fused with them before and after: their kernel lost
    1 s, and neither is given the loss (either might gain alone: zero is their bound). E
    and F likewise around q, gaining 1 s: each is given the whole gain, as if the other
    had none. D's match was not taken: D is left out."""
    p, q, a, b, c, d, e, f = (_node() for _ in range(8))
    a2, b2, c2, e2, f2 = _node(), _node(), _node(), _node(), _node()
    ma, mb, mc, md, me, mf = (_match(k, n) for k, n in zip("ABCDEF", (a, b, c, d, e, f)))
    before = _cost((2.0, [p, a, b]), (1.0, [c]), (1.0, [d]), (4.0, [q, e, f]))
    after = _cost((3.0, [p, a2, b2]), (0.5, [c2]), (1.0, [d]), (3.0, [q, e2, f2]))
    built = Built([(ma, {a2}), (mb, {b2}), (mc, {c2}), (me, {e2}), (mf, {f2})], {})
    assert shares.by_shape(before, after, built, [ma, mb, mc, md, me, mf], _shape, 1e-9) == \
        {"A": 0.0, "B": 0.0, "C": -0.5, "E": -1.0, "F": -1.0}


def test_nothing_is_shared_out_where_the_price_moved_elsewhere_or_was_timed_whole():
    a, a2, other = _node(), _node(), _node()
    ma = _match("A", a)
    built = Built([(ma, {a2})], {})
    before = _cost((1.0, [a]), (1.0, [other]))
    moved = _cost((2.0, [a2]), (1.0, [other]), total=3.5)      # 0.5 s no kernel explains
    assert shares.by_shape(before, moved, built, [ma], _shape, 0.1) == {}
    assert shares.by_shape(before, moved, built, [ma], _shape, 1.0) == {"A": 1.0}
    whole = Cost(3.0, moved.kernels, whole=True)
    assert shares.by_shape(before, whole, built, [ma], _shape, 1.0) == {}


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _four_convs(x1, x2, y1, y2, a, b, c, d):
    """Four 1x1 convs, each on an input of its own: two of one shape, two of another."""
    return (jnp.tanh(_conv(x1, a)) + 1.0, jnp.tanh(_conv(x2, b)) * 2.0,
            jnp.tanh(_conv(y1, c)) + 1.0, jnp.tanh(_conv(y2, d)) * 2.0)


FROZEN = range(4, 8)


def _args():
    r = lambda *s: jnp.asarray(R.standard_normal(s), jnp.float32)     # noqa: E731
    return (r(1, 16, 16, 8), r(1, 16, 16, 8), r(1, 6, 6, 24), r(1, 6, 6, 24),
            r(1, 1, 8, 8), r(1, 1, 8, 8), r(1, 1, 24, 24), r(1, 1, 24, 24))


def test_on_a_real_graph_each_shapes_share_is_what_its_own_whole_graph_try_changes():
    """Enlarging the 1x1 kernels to 3x3 (`enlarge-kernel`) at all four convs, shared
    out: each shape's share equals the change the move at that shape's two convs makes
    to the whole graph's price, priced by itself."""
    g = capture.capture(_four_convs, _args()).graph
    price = cost.Price(cost.Analytic(), FROZEN)
    rule = next(r for r in rules.ALL if r.name == "enlarge-kernel")
    found = rule.matches(g)
    groups = everywhere(found)
    assert len(found) == 4 and [len(x) for x in groups] == [4, 2, 2]
    built = Built()
    _, new = rewrite(g, rule, groups[0], None, built)
    got = shares.by_shape(price.breakdown(g), price.breakdown(new), built, found, shape_of,
                          1e-12)
    assert len(got) == 2
    for group in groups[1:]:
        _, alone = rewrite(g, rule, group)
        assert got[shape_of(group[0])] > 0
        assert np.isclose(got[shape_of(group[0])], price(alone) - price(g), rtol=1e-9)


def test_the_sweep_gives_no_whole_graph_try_to_a_shape_its_share_shows_losing(monkeypatch):
    """The same sweep with the kernels' prices (`cost.Price`) and with the bare total:
    the same graph found, but no try of `enlarge-kernel` at one shape's convs once its
    try at all four showed each shape losing."""
    import hlo_opt.search as searching
    from hlo_opt.search.core import Limits, Priced
    args = _args()
    g = capture.capture(_four_convs, args).graph
    model = cost.Analytic()
    tries, real = collections.Counter(), searching.rewrite

    def spy(graph, rule, at, max_nodes=None, built=None):
        tries[rule.name, len(at)] += 1
        return real(graph, rule, at, max_nodes, built)
    monkeypatch.setattr(searching, "rewrite", spy)
    found = {}
    for label, price in (("bare", lambda h: model.cost(h, FROZEN).total),
                         ("shared", cost.Price(model, FROZEN))):
        tries.clear()
        limits = Limits(None, None)
        found[label] = searching._everywhere(g, rules.ALL, Priced(price, limits), limits,
                                             10 * len(g.nodes))
        found[label + " tries"] = dict(tries)
    assert found["bare"][0].digest == found["shared"][0].digest
    assert found["bare"][1] == found["shared"][1]
    assert found["bare tries"][("enlarge-kernel", 4)] == 1
    assert found["bare tries"][("enlarge-kernel", 2)] == 2
    assert found["shared tries"][("enlarge-kernel", 4)] == 1
    assert ("enlarge-kernel", 2) not in found["shared tries"]
    assert_close(emit.run(found["shared"][0], args), emit.run(g, args), 1e-5)
