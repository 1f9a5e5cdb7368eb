"""A search's limits: the step a candidate costs, read across the views of one price
table (the whole graph's, each part's)."""
import jax.numpy as jnp

from hlo_opt import capture
from hlo_opt.search.core import Limits, Priced


def _graphs(n):
    fns = [jnp.tanh, jnp.exp, jnp.sin, jnp.cos, jnp.abs][:n]
    return [capture.capture(f, (jnp.ones((2, 3)),)).graph for f in fns]


def test_a_step_is_the_time_since_the_last_costing_by_any_view_of_the_prices():
    now = [0.0]
    clock = lambda: now[0]        # noqa: E731 - a hand-moved clock, no wall time read
    whole = Limits(None, 100.0, clock)
    priced = Priced(lambda g: 1.0, whole)
    a, b, c, d = _graphs(4)
    now[0] = 1.0
    priced(a)                                  # the sweep's last candidate
    part = Limits(None, 50.0, clock)
    view = priced.within(part)                 # the split's part, searched for 4 s
    now[0] = 5.0
    view(b)
    assert part.step == 0.0                    # not the 4 s since the sweep's costing
    now[0] = 5.5
    view(c)
    assert part.step == 0.5
    now[0] = 6.0
    priced(d)                                  # the stitched graph
    assert whole.step == 0.5                   # since the part's last costing, not 5.0
    assert whole.costed == 2 and part.costed == 2
    view(a)                                    # priced before: no step, no count
    assert part.costed == 2 and part.step == 0.5
