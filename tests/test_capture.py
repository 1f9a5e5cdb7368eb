"""jaxpr -> Graph: inlining, opaque pass-through, relu recognition, effects, consts."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore
from jax.interpreters import mlir

import hlo_opt
from hlo_opt import capture
from helpers import assert_same


def _ops(fn, *args):
    return [n.op for n in capture.capture(fn, args).graph.nodes]


def _opaque_names(fn, *args):
    return [n.params["primitive"].name for n in capture.capture(fn, args).graph.nodes
            if n.op == "opaque"]


def test_nested_calls_are_inlined():
    inner = jax.jit(lambda x: jnp.sin(x) * 2)
    def f(x):
        y = jax.jit(lambda t: jnp.cos(t) + 1)(inner(x))
        return jax.jit(lambda t: inner(t) - 1)(y)
    x = jnp.ones(3)
    assert _opaque_names(f, x) == []
    assert _ops(f, x).count("sin") == 2 and "cos" in _ops(f, x)
    assert_same(hlo_opt.jit(f, rules=())(x), jax.jit(f)(x))


def _checkpointed_loss(w, x):
    block = jax.checkpoint(lambda h: jnp.tanh(jnp.sin(h @ w) @ w))
    return (block(block(x)) ** 2).sum()


def _barriers(lowered) -> int:
    return lowered.as_text().count("optimization_barrier")


def test_checkpoint_keeps_the_recomputation_jax_asked_for():
    """`jax.checkpoint` is a memory plan: the backward pass recomputes the body behind an
    optimization barrier rather than keep its values from the forward pass. Inlined
    plainly, the barrier was lost (XLA may then keep the forward values alive: the
    memory the user's checkpoint saved); a grad taken outside the optimised program saw
    no checkpoint at all. Both now lower with jax.jit's barriers."""
    r = np.random.default_rng(0)
    w, x = (jnp.asarray(r.standard_normal(s), jnp.float32) for s in ((8, 8), (4, 8)))
    step = jax.grad(_checkpointed_loss)
    ops = _ops(step, w, x)
    assert "sin" in ops and "cos" in ops and _opaque_names(step, w, x) == [
        "optimization_barrier"] * 2, "the backward pass's bodies are inlined behind barriers"
    ours = hlo_opt.jit(step, rules=())
    assert _barriers(ours.lower(w, x)) == _barriers(jax.jit(step).lower(w, x)) == 2
    assert_same(ours(w, x), jax.jit(step)(w, x))

    assert _opaque_names(_checkpointed_loss, w, x) == ["remat2"] * 2
    outside = jax.jit(jax.grad(hlo_opt.jit(_checkpointed_loss, rules=())))
    reference = jax.jit(jax.grad(jax.jit(_checkpointed_loss)))
    assert _barriers(outside.lower(w, x)) == _barriers(reference.lower(w, x)) == 2
    assert_same(outside(w, x), reference(w, x))


def test_cumsum_passes_through_as_opaque():
    f = lambda x: jnp.cumsum(x, axis=0) + 1
    x = jnp.arange(6.0).reshape(3, 2)
    assert _opaque_names(f, x) == ["cumsum"]
    assert_same(hlo_opt.jit(f, rules=())(x), jax.jit(f)(x))


# A primitive jax has never heard of: it must come through untouched.
triple_p = jcore.Primitive("test_triple")
triple_p.def_impl(lambda x: x * 3)
triple_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(triple_p, mlir.lower_fun(lambda x: x * 3, multiple_results=False))


def test_custom_primitive_passes_through_as_opaque():
    f = lambda x: jnp.exp(triple_p.bind(x)) - 1
    x = jnp.linspace(0, 1, 5)
    graph = capture.capture(f, (x,)).graph
    (node,) = [n for n in graph.nodes if n.op == "opaque"]
    assert node.params["primitive"] is triple_p
    assert_same(hlo_opt.jit(f, rules=())(x), jax.jit(f)(x))
    np.testing.assert_allclose(hlo_opt.jit(f, rules=())(x), np.exp(3 * np.asarray(x)) - 1, rtol=1e-6)


def test_relu_is_recognised_and_keeps_its_gradient_at_zero():
    f = lambda x: jax.nn.relu(x).sum()
    x = jnp.array([-1.0, 0.0, 2.0])
    assert "relu" in _ops(f, x) and _opaque_names(f, x) == []
    assert_same(jax.grad(hlo_opt.jit(f, rules=()))(x), jnp.array([0.0, 0.0, 1.0]))


@jax.custom_jvp
def relu_lookalike(x):
    return jnp.maximum(x, 0.0)


relu_lookalike.defjvp(lambda primals, tangents: (relu_lookalike(primals[0]), tangents[0]))


def test_a_relu_lookalike_with_another_gradient_stays_opaque():
    f = lambda x: relu_lookalike(x).sum()
    x = jnp.array([-1.0, 0.0, 2.0])
    assert "relu" not in _ops(f, x) and _opaque_names(f, x) == ["custom_jvp_call"]
    assert_same(jax.grad(hlo_opt.jit(f, rules=()))(x), jnp.ones(3))   # its own (straight-through) rule


def test_custom_vjp_stays_opaque_and_keeps_its_gradient():
    from corpus import with_custom_vjp
    x = jnp.array([-2.0, 0.01, 3.0])
    assert _opaque_names(with_custom_vjp, x) == ["custom_vjp_call"]
    # the custom rule clips 2x to [-0.1, 0.1]; the inlined body would give 2x
    assert_same(jax.grad(hlo_opt.jit(with_custom_vjp, rules=()))(x), jnp.array([-0.1, 0.02, 0.1]))


def test_effects_are_chained_in_program_order():
    from corpus import with_debug_print
    graph = capture.capture(with_debug_print, (jnp.ones(3),)).graph
    first, second = graph.effects
    assert [n.params["fmt"] for n in graph.effects] == ["first {}", "second {}"]
    assert second.deps == (first,) and first.deps == ()
    order = list(graph.nodes)
    assert order.index(first) < order.index(second)


def _printed(fn, x, capfd, calls=2):
    for _ in range(calls):
        jax.block_until_ready(fn(x))
        jax.effects_barrier()
    return [l.split()[0] for l in capfd.readouterr().out.splitlines() if l.strip()]


def test_ordered_prints_run_once_per_call_in_order(capfd):
    def f(x):
        jax.debug.print("first {}", x.sum(), ordered=True)
        y = jnp.sin(x)
        jax.debug.print("second {}", y.sum(), ordered=True)
        return y * 2
    x = jnp.arange(3.0)
    assert _printed(hlo_opt.jit(f, rules=()), x, capfd) == ["first", "second"] * 2


def test_unordered_prints_behave_as_under_jax_jit(capfd):
    """Unordered prints may be scheduled either way by XLA; we emit the same program
    as jax.jit, so the same lines appear (once per call, in jax.jit's order)."""
    from corpus import with_debug_print
    x = jnp.arange(3.0)
    want = _printed(jax.jit(with_debug_print), x, capfd)
    got = _printed(hlo_opt.jit(with_debug_print, rules=()), x, capfd)
    assert sorted(want) == ["first", "first", "second", "second"] and got == want


def test_literals_and_closed_over_arrays_become_consts():
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = lambda x: x @ table + 2.0
    graph = capture.capture(f, (jnp.ones((4, 2)),)).graph
    consts = [n for n in graph.nodes if n.op == "const"]
    values = sorted(tuple(np.ravel(n.params["value"])) for n in consts)
    assert values == sorted([(2.0,), tuple(table.ravel())])


def test_static_and_keyword_arguments():
    def f(x, *, scale, power):
        return (x * scale) ** power
    captured = capture.capture(f, (jnp.ones(2),), {"scale": 3.0, "power": 2},
                               static_argnames=("power",))
    assert len(captured.graph.inputs) == 2           # x and scale; power is static
    assert "integer_pow" in [n.op for n in captured.graph.nodes]
