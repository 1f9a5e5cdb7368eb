"""The per-call memory term of the cost model: the temp-buffer estimate against XLA's own
buffer assignment, the mmap line, and the two rates' place in the price. No test asserts
a measured speed."""
import jax
import jax.numpy as jnp
import pytest

from hlo_opt import capture, cost
from hlo_opt.cost import fault_rates, layouts, memory, partition
from hlo_opt.frozen import weight_only

MiB = 1 << 20


def _im2col(n: int):
    """A 3x3 window's nine shifted slices side by side, then a matmul: XLA materialises
    the nine slices and their concatenation (~2 x 9 x n^2 x 32 floats)."""
    def f(x, w):
        cols = jnp.concatenate([x[:, i:i + n, j:j + n, :] for i in range(3) for j in range(3)],
                               axis=3)
        return cols.reshape(n * n, 288) @ w
    return f, (jnp.ones((1, n + 2, n + 2, 32)), jnp.ones((288, 32)))


def _estimate(graph):
    kernels = partition.partition(graph)
    return memory.temp_bytes(graph, kernels, [False] * len(kernels))


@pytest.mark.parametrize("n", [40, 100])
def test_the_temp_estimate_is_near_xlas_buffer_assignment(n):
    f, args = _im2col(n)
    xla = jax.jit(f).lower(*args).compile().memory_analysis().temp_size_in_bytes
    ours = _estimate(capture.capture(f, args).graph)
    assert 0.8 * xla <= ours <= 1.25 * xla


def test_a_temp_past_the_mmap_line_costs_its_faults_and_one_under_it_does_not():
    model = cost.Analytic()
    small, big = (capture.capture(*_im2col(n)).graph for n in (80, 147))
    assert _estimate(small) < memory.MMAP_LINE < _estimate(big)
    assert model.cost(small).faults == 0.0
    expect = _estimate(big) * fault_rates.DEFAULT_FRESH     # no weight copies: the threads' rate
    assert model.cost(big).faults == pytest.approx(expect)
    summed = sum(k.seconds for k in model.cost(big).kernels)
    assert model.cost(big).total == pytest.approx(summed + expect)


def _refused():
    raise AssertionError("a rate was calibrated where no page past the line needs it")


def test_weight_copies_fault_at_the_copies_rate_and_other_pages_at_the_threads():
    g = capture.capture(lambda x: x * 2, (jnp.ones((4,)),)).graph
    copy_rate, fresh = (lambda: 1.0), (lambda: 10.0)
    assert memory.seconds(g, 40 * MiB, 30 * MiB, copy_rate, fresh) == 30 * MiB + 100 * MiB
    assert memory.seconds(g, 40 * MiB, 0, _refused, fresh) == 400 * MiB
    assert memory.seconds(g, 40 * MiB, 40 * MiB, copy_rate, _refused) == 40 * MiB
    assert memory.seconds(g, 20 * MiB, 20 * MiB, _refused, _refused) == 0.0   # under the line


def test_an_nchw_programs_weight_copies_are_priced_apart_from_its_activations():
    """Twelve 1x1 NCHW convs of 4 MiB weights on a 56x56 image: XLA copies each weight
    every call (48 MiB, past the line with the activations)."""
    def f(x, *ws):
        return sum(jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                                dimension_numbers=("NCHW", "OIHW", "NCHW"))
                   for w in ws)
    args = (jnp.ones((1, 1024, 56, 56)),) + tuple(jnp.ones((1024, 1024, 1, 1)) for _ in range(12))
    graph = capture.capture(f, args).graph
    kernels = partition.partition(graph, conv_layouts=True)
    pre = [False] * len(kernels)
    temp, copies = memory.temp_bytes(graph, kernels, pre), layouts.weight_copies(kernels, pre)
    assert copies == 12 * 4 * MiB and temp > memory.MMAP_LINE and temp > copies
    faults = cost.Analytic().cost(graph).faults
    assert faults == pytest.approx(copies * fault_rates.DEFAULT_FAULT
                                   + (temp - copies) * fault_rates.DEFAULT_FRESH)



def test_the_depth_first_order_is_taken_where_program_order_holds_more():
    """Two branches, each a chain of 16 MiB steps, read by one add at the end: in program
    order both branches' buffers are live at once (past the line), depth first only one
    branch's and the other's result."""
    def f(x, y):
        a, b = x, y
        for _ in range(3):
            a, b = jnp.sin(a) @ jnp.eye(2048)[:, :2048], jnp.cos(b) @ jnp.eye(2048)[:, :2048]
        return a + b
    x = jnp.ones((2048, 2048))       # 16 MiB each
    g = capture.capture(f, (x, x)).graph
    kernels = partition.partition(g)
    pre = [False] * len(kernels)
    in_order = memory._peak(g, kernels, pre)
    order = memory._depth_first(g, kernels)
    assert sorted(order) == list(range(len(kernels)))
    assert memory.temp_bytes(g, kernels, pre) < in_order


def _views(count: int):
    """A concatenation read by `count` dots, each through a reshape of its own (as
    NASNet-A's is by two 1x1 convs made dots); the reshapes fuse into the loop that
    makes it, so each is an output of that kernel."""
    def f(a, b, w1, w2):
        c = jnp.concatenate([jax.nn.relu(a), jax.nn.relu(b)], axis=-1)
        out = (c.reshape(3136, 640) @ w1,)
        return out + (c.reshape(3136 * 5, 128) @ w2,) if count == 2 else out
    return f, (jnp.ones((1, 56, 56, 320)), jnp.ones((1, 56, 56, 320)),
               jnp.ones((640, 64)), jnp.ones((128, 64)))


def test_two_reshapes_of_one_value_a_kernel_makes_are_one_buffer():
    (one, args), (two, _) = _views(1), _views(2)
    xla = [jax.jit(f).lower(*args).compile().memory_analysis().temp_size_in_bytes
           for f in (one, two)]
    assert xla[1] <= xla[0]              # XLA: the second view is a bitcast, no buffer
    g = capture.capture(two, args).graph
    assert len(next(k for k in partition.partition(g) if k.kind == "loop").outputs) == 2
    assert _estimate(g) == _estimate(capture.capture(one, args).graph)


def test_outputs_and_weights_are_not_temporaries():
    def f(w, x):
        return jnp.tanh(x @ (w * 2.0))
    args = (jnp.ones((64, 64)), jnp.ones((64, 64)))
    g = capture.capture(f, args).graph
    kernels = partition.partition(g)
    live = memory.temp_bytes(g, kernels, [False] * len(kernels))
    assert live == 64 * 64 * 4 * 2          # w*2 and the dot's result; tanh is the output
    fixed = weight_only(g, (0,))
    frozen = [all(v.node in fixed for v in k.inputs) for k in kernels]
    assert memory.temp_bytes(g, kernels, frozen) == 64 * 64 * 4   # w*2 is an argument now
