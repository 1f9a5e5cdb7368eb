"""Sibling dots and convs priced together: which kernels are siblings, the program they
make together, and the measured model pricing each its share of that program."""
import jax.numpy as jnp
import numpy as np
import pytest

from hlo_opt import capture, cost
from hlo_opt.cost import model as cost_model, siblings
from hlo_opt.cost.partition import isolate, partition

RNG = np.random.default_rng(0)
X = jnp.asarray(RNG.standard_normal((8, 32)), jnp.float32)
W = [jnp.asarray(RNG.standard_normal((32, 32)), jnp.float32) for _ in range(4)]
NARROW = jnp.asarray(RNG.standard_normal((32, 16)), jnp.float32)


def three_and_a_chain(x, a, b, c, d, narrow):
    """x @ a, x @ b, x @ c side by side; tanh(x @ c) @ d after them; x @ narrow apart."""
    return x @ a, x @ b, jnp.tanh(x @ c) @ d, x @ narrow


def units_of(fn, *args):
    kernels = partition(capture.capture(fn, args).graph)
    units = siblings.groups(kernels, [False] * len(kernels))
    return kernels, units


def dots(kernels, unit):
    return [n for i in unit for n in kernels[i].nodes if n.op == "dot_general"]


def test_dots_of_one_structure_that_no_path_joins_are_one_unit():
    kernels, units = units_of(three_and_a_chain, X, *W, NARROW)
    assert sorted(len(u) for u in units if dots(kernels, u)) == [1, 1, 3]
    together = next(u for u in units if len(u) == 3)
    assert all(kernels[i].kind == "contract" for i in together)
    # the dot after the tanh has the same shapes, but reads one of the three: apart
    after = next(u for u in units
                 if dots(kernels, u) and dots(kernels, u)[0].inputs[0].node.op == "tanh")
    assert after != together and len(after) == 1
    assert sorted(i for u in units for i in u) == list(range(len(kernels)))   # a partition


def beside_a_loop(x, a, b, c):
    """x @ a, and tanh(x) @ b beside it: a loop kernel before one of two like dots; then
    (x @ a) @ c, after the first."""
    first = x @ a
    return first, jnp.tanh(x) @ b, first @ c


def test_a_loop_before_one_dot_does_not_part_it_from_its_sibling():
    kernels, units = units_of(beside_a_loop, X, *W[:3])
    assert [k.kind for k in kernels].count("loop") == 1
    assert sorted(len(u) for u in units if dots(kernels, u)) == [1, 2]
    together = next(u for u in units if len(u) == 2)
    # the two that no path joins, not the dot that reads the first one's result
    assert {dots(kernels, [i])[0].inputs[0].node.op for i in together} == {"tanh", "input"}
    after = next(u for u in units if dots(kernels, u) and len(u) == 1)
    assert dots(kernels, after)[0].inputs[0].node.op == "dot_general"


def test_kernels_priced_alone_and_other_kinds_stay_units_of_one(monkeypatch):
    kernels = partition(capture.capture(three_and_a_chain, (X, *W, NARROW)).graph)
    assert all(len(u) == 1 for u in siblings.groups(kernels, [True] * len(kernels)))
    monkeypatch.setattr(siblings, "MOST", 2)
    units = siblings.groups(kernels, [False] * len(kernels))
    assert sorted(len(u) for u in units if dots(kernels, u)) == [1, 1, 1, 2]


def test_a_merged_unit_reads_what_its_kernels_share_once():
    kernels, units = units_of(three_and_a_chain, X, *W, NARROW)
    members = [kernels[i] for i in next(u for u in units if len(u) == 3)]
    merged = siblings.merge(members)
    assert [n.op for n in merged.nodes] == ["dot_general"] * 3
    assert len(merged.inputs) == 4 and len(merged.outputs) == 3      # x once, a, b, c
    program = isolate(merged)
    assert len(program.inputs) == 4 and len(program.outputs) == 3
    assert siblings.merge(members[:1]) is members[0]


def four_dots(x, a, b, c, d):
    return x @ a, x @ b, x @ c, x @ d


def test_the_measured_model_prices_each_sibling_its_share_of_their_program(tmp_path):
    graph = capture.capture(four_dots, (X, *W)).graph
    model = cost.Measured(tmp_path, whole_below=0)        # priced by its kernels
    priced = model.cost(graph)
    shares = [k.seconds for k in priced.kernels if k.kernel.kind == "contract"]
    assert len(shares) == 4 and len(set(shares)) == 1 and shares[0] > 0
    assert model.measured == 1                      # one program: the four together
    merged = siblings.merge([k.kernel for k in priced.kernels if k.kernel.kind == "contract"])
    together = model.cache.get(cost_model._timing(isolate(merged), merged))
    assert together is not None and 4 * shares[0] == pytest.approx(together)


def test_the_roofline_prices_each_kernel_by_itself():
    graph = capture.capture(four_dots, (X, *W)).graph
    model = cost.Analytic()
    priced = model.cost(graph)
    assert not model.side_by_side
    assert [k.seconds for k in priced.kernels] == [model.kernel_seconds(k.kernel)
                                                   for k in priced.kernels]
