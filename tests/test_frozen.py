"""Splitting a graph at its frozen inputs: weights once, the rest per call, same answers."""
import jax
import jax.numpy as jnp
import numpy as np

from hlo_opt import capture, emit, frozen
from helpers import assert_same

R = np.random.default_rng(0)
X = jnp.asarray(R.standard_normal((4, 8)), jnp.float32)
WQ, WK = (jnp.asarray(R.standard_normal((8, 8)), jnp.float32) for _ in range(2))


def merged_qk(x, wq, wk):
    both = jnp.concatenate([wq.T, wk.T], axis=0)        # weight-only
    y = x @ both.T
    return jnp.tanh(y) * 2.0, wq.sum()                  # an output that is weight-only too


def run_split(s, args):
    w = emit.run(s.weights, [args[i] for i in s.frozen])
    return emit.run(s.runtime, [args[i] for i in s.live] + w)


def test_split_runs_weights_once_and_agrees():
    g = capture.capture(merged_qk, (X, WQ, WK)).graph
    s = frozen.split(g, (1, 2))
    assert s.frozen == (1, 2) and s.live == (0,)
    assert {n.op for n in s.weights.nodes} >= {"transpose", "concatenate", "reduce_sum"}
    runtime_ops = {n.op for n in s.runtime.nodes}
    assert "concatenate" not in runtime_ops and "dot_general" in runtime_ops
    assert_same(run_split(s, (X, WQ, WK)), emit.run(g, (X, WQ, WK)))


def test_nothing_frozen_keeps_everything_per_call():
    g = capture.capture(merged_qk, (X, WQ, WK)).graph
    s = frozen.split(g, ())
    assert len(s.weights.nodes) == 0 and len(s.runtime.nodes) == len(g.nodes)
    assert_same(run_split(s, (X, WQ, WK)), emit.run(g, (X, WQ, WK)))


def test_constants_stay_in_the_per_call_program_and_effects_keep_their_place(capfd):
    def f(x, w):
        jax.debug.print("w sum {}", w.sum())            # effectful: never precomputed
        return x @ (w * 2.0) + 1.0
    g = capture.capture(f, (X, WQ)).graph
    s = frozen.split(g, (1,))
    assert any(n.op == "const" for n in s.runtime.nodes) and len(s.runtime.effects) == 1
    assert_same(run_split(s, (X, WQ)), emit.run(g, (X, WQ)))
    assert capfd.readouterr().out.count("w sum") == 2


def test_a_broadcast_of_a_weight_that_per_call_work_reads_stays_per_call():
    """`x + b` reads `b` broadcast to x's shape: computed once, the full-shape array is
    what each call would read; the per-call program broadcasts the bias itself. A
    broadcast that weight-only work reads (`w * broadcast(s)`) is still precomputed."""
    def biased(x, b, w, s):
        return x + b, x @ (w * jnp.broadcast_to(s, w.shape))
    args = (X, WQ[0], WK, WQ[1, :1])
    g = capture.capture(biased, args).graph
    s = frozen.split(g, (1, 2, 3))
    per_call = [n for n in s.runtime.nodes if n.op == "broadcast_in_dim"]
    assert [n.inputs[0].node.op for n in per_call] == ["input"]
    assert per_call[0].inputs[0].type.shape == (8,)
    assert sorted(v.type.shape for v in s.weights.outputs) == [(8,), (8, 8)]
    assert "mul" in {n.op for n in s.weights.nodes} and \
        "mul" not in {n.op for n in s.runtime.nodes}
    assert_same(run_split(s, args), emit.run(g, args))


def test_equal_weight_values_are_computed_once_and_read_as_one_input():
    def unrolled(x, a, b):          # the same concatenated weights built at each step
        for _ in range(3):
            x = jnp.tanh(x @ jnp.concatenate([a, b], axis=1))[:, :8]
        return x
    g = capture.capture(unrolled, (X, WQ, WK)).graph
    assert sum(n.op == "concatenate" for n in g.nodes) == 3
    s = frozen.split(g, (1, 2))
    assert len(s.weights.outputs) == 1 and len(s.runtime.inputs) == 2
    assert_same(run_split(s, (X, WQ, WK)), emit.run(g, (X, WQ, WK)))


def test_a_frozen_input_read_as_it_is_reaches_the_per_call_program_uncopied():
    def uses_both(x, w, v):             # w read as it is; v only through a concat
        return jnp.tanh(x @ w) @ jnp.concatenate([v, v], axis=1)
    g = capture.capture(uses_both, (X, WQ, WK)).graph
    runner = frozen.Runner(g, (1, 2))
    program, args = runner.runtime_args([X, WQ, WK])
    assert sum(a is WQ for a in args) == 1 and not any(a is WK for a in args)
    assert len(args) == 3                                    # x, w, concat(v, v)
    assert_same(runner([X, WQ, WK])[0], jax.jit(uses_both)(X, WQ, WK))
    assert runner.computed == 1
