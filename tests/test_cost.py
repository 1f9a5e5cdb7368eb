"""The cost model: kernel partition, the on-disk cache, the roofline, frozen weights and
measured kernels. No test asserts a measured speed; they assert structure and order."""
import dataclasses
import json
import logging
import multiprocessing
import os

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from hlo_opt import capture, cost, deadline, emit
from hlo_opt.cost import analytic, pairing, partition as part, residency
from hlo_opt.cost import anchors as cost_anchors
from hlo_opt.cost import model as cost_model
from hlo_opt.cost import whole as cost_whole
from hlo_opt.cost.cache import Cache
from hlo_opt.frozen import weight_only
from helpers import assert_close, run_kernels

HEADER = {"device": "test-device", "platform": "cpu", "jax": "0.10.2"}


def graph_of(fn, *args):
    return capture.capture(fn, args).graph


def ops_of(kernels):
    return [(k.kind, [n.op for n in k.nodes]) for k in kernels]


X, W, B = jnp.ones((4, 8)), jnp.ones((8, 16)), jnp.ones((16,))


# -- partition ---------------------------------------------------------------------------

def test_mlp_partitions_into_library_calls_and_one_loop_between():
    g = graph_of(lambda x, w, b, v: jax.nn.relu(x @ w + b) @ v, X, W, B, jnp.ones((16, 2)))
    assert ops_of(part.partition(g)) == [
        ("contract", ["dot_general"]),
        ("loop", ["broadcast_in_dim", "add", "relu"]),
        ("contract", ["dot_general"])]


def test_gpu_fuses_the_epilogue_into_the_contraction():
    g = graph_of(lambda x, w, b: jax.nn.relu(x @ w + b), X, W, B)
    kernels = part.partition(g, epilogue_fusion=True)
    assert [k.kind for k in kernels] == ["contract"]
    assert {n.op for n in kernels[0].nodes} >= {"dot_general", "add", "relu"}


def test_elementwise_and_layout_ops_fuse_into_one_loop_and_a_lone_transpose_is_a_copy():
    fused = part.partition(graph_of(lambda x: jnp.tanh(x.T * 2.0) + 1.0, X))
    assert ops_of(fused) == [("loop", ["transpose", "mul", "tanh", "add"])]
    assert ops_of(part.partition(graph_of(lambda x: x.T, X))) == [("loop", ["transpose"])]


def test_a_reduction_takes_its_producers_and_ends_its_kernel():
    kernels = part.partition(graph_of(lambda x: jnp.sum(jnp.exp(x), axis=1) * 2.0, X))
    assert ops_of(kernels) == [("reduce", ["exp", "reduce_sum"]), ("loop", ["mul"])]


def test_reshape_only_kernels_are_free():
    (kernel,) = part.partition(graph_of(lambda x: x.reshape(2, 16), X))
    assert kernel.kind == "free" and analytic.DEFAULT.kernel_seconds(kernel) == 0.0


def _residual(z_is_output: bool):
    """A block's add+relu read whole by one dot and, reshaped, by another (ResNeXt's
    1x1 convs as dots); with `z_is_output`, the reshape is also a graph output."""
    def fn(x, y, w1, w2):
        z = jax.nn.relu(x + y)
        flat = z.reshape(64, 16)
        a = lax.dot_general(z, w2, (((3,), (0,)), ((), ())))
        return (flat @ w1, a, flat) if z_is_output else (flat @ w1, a)
    return fn


RESIDUAL_ARGS = tuple(jax.random.normal(jax.random.key(i), s) for i, s in
                      enumerate([(1, 8, 8, 16), (1, 8, 8, 16), (16, 4), (16, 4)]))


def test_a_bitcast_of_a_value_a_kernel_hands_on_is_read_from_that_buffer_not_written():
    g = graph_of(_residual(False), *RESIDUAL_ARGS)
    kernels = part.partition(g)
    (loop,) = [k for k in kernels if k.kind == "loop"]
    z = next(v for v in loop.outputs if v.type.shape == (1, 8, 8, 16))
    flat = next(v for v in loop.outputs if v.type.shape == (64, 16))
    assert loop.views == ((flat, z),)
    assert part.ports(loop)[1] == (z,)
    assert [v.type.shape for v in part.isolate(loop).outputs] == [(1, 8, 8, 16)]
    one_write = dataclasses.replace(loop, outputs=(z,), views=())
    assert analytic.DEFAULT.kernel_seconds(loop) == analytic.DEFAULT.kernel_seconds(one_write)
    assert_close(run_kernels(g, kernels, RESIDUAL_ARGS),
                 list(jax.jit(_residual(False))(*RESIDUAL_ARGS)), 1e-5, "kernel by kernel")
    # a graph output is a buffer of its own: the kernel writes it
    g = graph_of(_residual(True), *RESIDUAL_ARGS)
    (loop,) = [k for k in part.partition(g) if k.kind == "loop"]
    assert loop.views == () and len(part.ports(loop)[1]) == 2


def test_kernels_stay_convex():
    # exp -> dot -> add, and exp -> add: putting exp and add in one kernel would need
    # the dot both before and after it.
    def f(x, w):
        e = jnp.exp(x)
        return e + e @ w
    kernels = part.partition(graph_of(f, X, jnp.ones((8, 8))))
    kernel_of = {n.op: i for i, k in enumerate(kernels) for n in k.nodes}
    assert kernel_of["exp"] != kernel_of["add"]


def test_no_two_kernels_feed_each_other_through_a_third():
    """`exp` with `exp + dot2`, and `tanh(dot1)` with `sin` (by their sum), are each
    convex; fused so, the first feeds dot1 -> the second -> dot2 -> the first. (A BERT
    part's candidate made such kernels, and the partition raised a CycleError.)"""
    def f(x, y, w, w2):
        a1 = jnp.exp(x)
        b1 = jnp.tanh(a1 @ w)
        b2 = jnp.sin(y)
        return a1 + b2 @ w2, b1 + b2
    g = graph_of(f, X, X, jnp.ones((8, 8)), jnp.ones((8, 8)))
    kernels = part.partition(g)
    made = {n.out() for n in g.nodes if n.op in ("input", "const")}
    for k in kernels:                # producers first: every input made before
        assert all(v in made for v in k.inputs), [n.op for n in k.nodes]
        made.update(v for n in k.nodes for v in n.outputs)
    kernel_of = {n.op: i for i, k in enumerate(kernels) for n in k.nodes}
    assert kernel_of["exp"] != kernel_of["tanh"] or kernel_of["sin"] != kernel_of["tanh"]

def test_kernels_alike_in_structure_are_priced_once_and_share_a_program():
    """A kernel's price is remembered by its structure, not its node objects: a graph
    rebuilt on new nodes prices no kernel again; a kernel that differs in an op, in
    where its inputs come from, or in what it reads cold is another key, and kernels
    of equal structure isolate to one program."""
    def f(x, w, b):
        return jnp.tanh(x @ w + b)

    class Counting(cost.Analytic):
        calls = 0

        def kernel_seconds(self, kernel):
            Counting.calls += 1
            return super().kernel_seconds(kernel)

    model = Counting()
    first, again = graph_of(f, X, W, B), graph_of(f, X, W, B)
    assert not set(first.nodes) & set(again.nodes)
    model.cost(first)
    priced = Counting.calls
    assert priced == len(part.partition(first))
    model.cost(again)
    assert Counting.calls == priced
    model.cost(graph_of(lambda x, w, b: jnp.sin(x @ w + b), X, W, B))
    assert Counting.calls == priced + 1                 # the dot is the same kernel

    keys = [part.structure(k) for k in part.partition(first) + part.partition(again)]
    assert keys[:2] == keys[2:] and keys[0] != keys[1]
    loop = part.partition(first)[1]
    swapped = graph_of(lambda x, w, b: jnp.tanh(b + x @ w), X, W, B)
    assert part.structure(part.partition(swapped)[1]) != part.structure(loop)
    cold = part.structure(dataclasses.replace(loop, cold=loop.inputs[-1:]))
    assert cold != part.structure(loop)
    assert part.isolate(part.partition(again)[1]).digest == part.isolate(loop).digest


def test_one_kernel_made_in_another_order_isolates_to_one_program():
    """The isolated program is the timing's cache key: a kernel whose nodes were made in
    another order (operands met in another order, outputs listed in another order) is
    the same program, its cold input at the same place; a kernel that differs is not."""
    x, y = jnp.ones((4, 8)), jnp.full((4, 8), 2.0)

    def first(x, y):
        a, b = jnp.exp(x), jnp.sin(y)
        return a + b, a * b

    def second(x, y):
        b, a = jnp.sin(y), jnp.exp(x)
        return a * b, a + b

    graphs = [graph_of(f, x, y) for f in (first, second)]
    loops = [part.partition(g)[0] for g in graphs]
    place = [lambda v, g=g: g.inputs.index(v.node) for g in graphs]
    assert [n.op for n in loops[0].nodes] != [n.op for n in loops[1].nodes]
    assert list(map(place[0], loops[0].inputs)) != list(map(place[1], loops[1].inputs))
    programs = [part.isolate(k) for k in loops]
    assert programs[0].digest == programs[1].digest
    for g, kernel, program, at in zip(graphs, loops, programs, place):
        reads, outputs = part.ports(kernel)     # the program's inputs and outputs, in order
        got = emit.run(program, [(x, y)[at(v)] for v in reads])
        want = dict(zip(g.outputs, emit.run(g, [x, y])))
        assert len(got) == len(outputs) == 2
        for value, out in zip(outputs, got):
            assert_close(out, want[value], 1e-6)
    # a cold input is named by its place in the program, whichever order made it
    colds = [cost_model._cold(dataclasses.replace(k, cold=tuple(
        v for v in k.inputs if at(v) == 1))) for k, at in zip(loops, place)]
    assert colds[0] == colds[1] and len(colds[0]) == 1
    other = part.partition(graph_of(lambda x, y: (jnp.exp(x) - jnp.sin(y), jnp.exp(x)), x, y))
    assert part.isolate(other[0]).digest != programs[0].digest


@pytest.mark.parametrize("name", ["resnet50", "bert", "nasrnn", "sru", "inception_v3"])
def test_isolated_kernels_compose_to_the_whole_program(name):
    import models
    fn, params, inputs = models.build(name, small=True)
    g = capture.capture(fn, (params, *inputs)).graph
    kernels = part.partition(g, conv_layouts=True)
    covered = [n for k in kernels for n in k.nodes]
    assert len(covered) == len(set(covered)) == sum(
        n.op not in ("input", "const") for n in g.nodes)
    # Run kernel by kernel, each as its own program, and compare with the whole graph.
    got = run_kernels(g, kernels, jax.tree.leaves((params, *inputs)))
    want = emit.run(g, jax.tree.leaves((params, *inputs)))
    assert_close(got, want, 1e-6, name)


# -- the cache ---------------------------------------------------------------------------

def test_cache_round_trips_through_the_file(tmp_path):
    c = Cache("t", HEADER, tmp_path)
    c.put("k", 1.5)
    c.flush()
    assert Cache("t", HEADER, tmp_path).get("k") == 1.5
    assert json.loads(c.path.read_text())["header"]["device"] == "test-device"


def test_corrupt_cache_is_rebuilt_with_a_warning(tmp_path, caplog):
    c = Cache("t", HEADER, tmp_path)
    c.put("k", 1.0)
    c.flush()
    c.path.write_text('{"header": {"format": 1, "na')        # torn by hand
    with caplog.at_level(logging.WARNING, logger="hlo_opt"):
        fresh = Cache("t", HEADER, tmp_path)
    assert len(fresh) == 0 and "unreadable" in caplog.text
    fresh.put("k2", 2.0)
    fresh.flush()
    assert Cache("t", HEADER, tmp_path).get("k2") == 2.0


def test_a_jax_version_change_does_not_reuse_entries(tmp_path, caplog):
    old = Cache("t", HEADER, tmp_path)
    old.put("k", 1.0)
    old.flush()
    new_header = dict(HEADER, jax="0.11.0")
    assert Cache("t", new_header, tmp_path).get("k") is None
    # Even a file copied under the new name is refused: its header says what it is for.
    new = Cache("t", new_header, tmp_path)
    new.path.write_text(old.path.read_text())
    with caplog.at_level(logging.WARNING, logger="hlo_opt"):
        assert len(Cache("t", new_header, tmp_path)) == 0
    assert "written for something else" in caplog.text


def test_kernel_timings_of_another_host_cpu_are_not_reused(tmp_path, monkeypatch):
    """jax calls every CPU "cpu": the processor is in the header, so a cache directory
    carried to another host (this project's VM moved from AMD to Intel) starts afresh."""
    if jax.devices()[0].platform != "cpu":
        pytest.skip("a CPU's header; an accelerator has its own device kind")
    here = cost_model.device_header()
    first = Cache("kernels", here, tmp_path)
    first.put("k", 1.0)
    first.flush()
    monkeypatch.setattr(cost_model, "cpu_model", lambda: "Another Processor")
    there = cost_model.device_header()
    assert there != here and there["device"] == here["device"]
    assert Cache("kernels", there, tmp_path).get("k") is None
    assert Cache("kernels", here, tmp_path).get("k") == 1.0


def test_two_hosts_of_one_processor_name_with_other_caches_do_not_share_timings(monkeypatch):
    """Two VMs both named "AMD EPYC", one with 8 MiB of L3 and one with 32: the cache's
    size decides which operands are timed cold, so it is part of the header."""
    if jax.devices()[0].platform != "cpu":
        pytest.skip("a CPU's header; an accelerator has its own device kind")
    monkeypatch.setattr(residency, "last_level_cache", lambda: 8 << 20)
    small = cost_model.device_header()
    monkeypatch.setattr(residency, "last_level_cache", lambda: 32 << 20)
    large = cost_model.device_header()
    assert small != large and small["device"] == large["device"]


def _writer(directory, worker, count):
    c = Cache("t", HEADER, directory)
    for i in range(count):
        c.put(f"w{worker}-{i}", float(i))
        c.flush()


def test_concurrent_writers_lose_and_tear_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = Cache("t", HEADER, tmp_path).entries
    assert entries == {f"w{w}-{i}": float(i) for w in range(4) for i in range(40)}
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_an_unwritable_cache_directory_warns_and_keeps_working(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    c = Cache("t", HEADER, blocker / "sub")        # a directory under a file: cannot exist
    c.put("k", 1.0)
    with caplog.at_level(logging.WARNING, logger="hlo_opt"):
        c.flush()
    assert c.get("k") == 1.0 and "cannot write" in caplog.text


# -- the roofline --------------------------------------------------------------------------

def _cost(model, fn, *args, frozen=()):
    return model.cost(graph_of(fn, *args), frozen=frozen).total


def test_roofline_orders_work_by_size():
    model = cost.Analytic()
    big, small = jnp.ones((1024, 1024)), jnp.ones((64, 64))
    assert _cost(model, jnp.matmul, big, big) > 100 * _cost(model, jnp.matmul, small, small)


def test_roofline_charges_unfused_intermediates_and_nchw_relayout():
    model = cost.Analytic()
    x = jnp.ones((256, 256))
    fused = _cost(model, lambda x: jnp.tanh(x * 2.0) + 1.0, x)
    unfused = _cost(model, lambda x: jnp.tanh(jnp.sort(x * 2.0)) + 1.0, x)   # opaque sort
    assert unfused > fused
    img, k = jnp.ones((1, 64, 28, 28)), jnp.ones((64, 64, 3, 3))

    def conv(layout):
        def f(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=(layout, "OIHW", layout))
        return f
    nhwc_img = jnp.ones((1, 28, 28, 64))
    assert _cost(model, conv("NCHW"), img, k) > _cost(model, conv("NHWC"), nhwc_img, k)


# -- frozen weights ------------------------------------------------------------------------

def test_weight_only_kernels_are_precomputed_when_frozen():
    def merged(x, wq, wk):
        both = jnp.concatenate([wq, wk], axis=1)       # weight-only: once per weight value
        return x @ both
    args = (X, W, W)
    model = cost.Analytic()
    g = graph_of(merged, *args)
    live, frozen = model.cost(g), model.cost(g, frozen=(1, 2))
    assert frozen.total < live.total
    assert [k.precomputed for k in frozen.kernels] == [True, False]
    assert not any(k.precomputed for k in live.kernels)
    assert {n.op for n in weight_only(g, (1, 2))} >= {"concatenate"}
    assert not any(n.op == "dot_general" for n in weight_only(g, (1, 2)))


# -- measured kernels -------------------------------------------------------------------

def test_measured_kernels_are_timed_once_and_cached(tmp_path):
    g = graph_of(lambda x, w, b: jax.nn.relu(x @ w + b), X, W, B)
    first = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    c1 = first.cost(g)
    assert first.measured == 2 and all(k.seconds > 0 for k in c1.kernels)
    again = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    assert again.cost(g).total == c1.total and again.measured == 0


def test_writing_the_cache_counts_as_timing(tmp_path, monkeypatch):
    """The search's clock leaves out `measuring`: a flush of a large cache file after
    each new timing, left on the clock, made a cold search stop far short of a warm
    one. On a stand-in clock that only a write of the cache advances (by 1.5 s), the
    model's `measuring` is exactly the writes."""
    import types
    from hlo_opt.cost import stopwatch
    now = [0.0]
    monkeypatch.setattr(stopwatch, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    g = graph_of(lambda x, w, b: jax.nn.relu(x @ w + b), X, W, B)
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    real, writes = model.cache.flush, []

    def slow_flush():
        if model.cache._dirty:
            writes.append(1)
            now[0] += 1.5
        real()
    monkeypatch.setattr(model.cache, "flush", slow_flush)
    model.cost(g)
    assert writes and model.measuring == 1.5 * len(writes)
    model.cost(g)                                # warm: nothing timed, nothing written
    assert len(writes) == 1 and model.measuring == 1.5


def test_a_stopwatch_counts_as_it_goes_and_a_run_within_a_run_once(monkeypatch):
    import types
    from hlo_opt.cost import stopwatch
    now = [0.0]
    monkeypatch.setattr(stopwatch, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    watch = stopwatch.Stopwatch()
    with watch.running():
        now[0] += 1.0
        assert watch.read() == 1.0 and watch.spent == 0.0
        with watch.running():
            now[0] += 2.0
        assert watch.read() == 3.0
    now[0] += 5.0                            # not running: not spent
    assert watch.read() == watch.spent == 3.0


def test_the_search_clock_stands_still_while_a_batch_is_timed(tmp_path, monkeypatch):
    """The search's clock leaves out `measuring`, and reads it between the compiles of
    a batch (`hlo_opt.deadline`): the timing under way counts as it goes. Counted only
    once the batch was done, an 11 s batch read as 11 s of search, and the deadline
    stopped Inception-v3's layout move half priced."""
    import time
    from hlo_opt import pipeline
    from hlo_opt.cost import measure
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])     # a hand-moved clock
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    clock, read = pipeline.SearchClock(model, 10.0), []

    def time_graphs(graphs, **_):
        for _ in graphs:
            now[0] += 2.0                  # a compile and a timing
            read.append(clock())
        return [1e-4] * len(graphs)
    monkeypatch.setattr(measure, "time_graphs", time_graphs)
    g = graph_of(lambda x, w, b: jnp.tanh(jax.nn.relu(x @ w + b) @ w.T), X, W, B)
    start = clock()
    model.prepare([k for k in part.partition(g) if k.kind != "free"])
    assert len(read) >= 2 and read == [start] * len(read)
    assert model.measuring == 2.0 * len(read) and model.measured >= 2


def test_short_programs_are_timed_whole_against_a_reference(tmp_path):
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))

    def light(x, w):
        return x @ w

    def heavy(x, w):          # same signature, 16x the work
        for _ in range(16):
            x = jnp.tanh(x @ w)
        return x
    # "Short" is `whole_below`, set far above either program's fixed roofline.
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=1.0)
    first, second = model.cost(graph_of(light, x, w)), model.cost(graph_of(heavy, x, w))
    assert first.whole and second.whole and model.programs == 2
    assert second.total > first.total
    assert len(model.whole.references) == 1           # heavy was timed against light
    again = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=1.0)
    assert again.cost(graph_of(heavy, x, w)).total == second.total and again.programs == 0
    summed = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=0.0)
    assert not summed.cost(graph_of(light, x, w)).whole and summed.programs == 0


def test_an_empty_call_read_slow_is_read_again(tmp_path, monkeypatch):
    """The empty call's cost, read while the machine was busy, stood for the whole
    process: every short program read no longer than it and was priced `EPSILON`, all
    alike (small SRU's four variants, in one CI run). Such a reading is read again."""
    from hlo_opt.cost import measure
    monkeypatch.setattr(measure, "_overheads", [5e-3])     # the process's one reading
    monkeypatch.setattr(measure, "_overhead_read_at", -float("inf"))
    monkeypatch.setattr(measure, "REREAD", 60.0)     # this test's timings within it
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))

    def heavy(x, w):          # 16x light's work
        for _ in range(16):
            x = jnp.tanh(x @ w)
        return x
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=1.0)
    light = model.cost(graph_of(lambda x, w: x @ w, x, w))
    assert light.whole and light.total > measure.EPSILON
    assert len(measure._overheads) == 2 and measure.dispatch_overhead() < 5e-3
    assert model.cost(graph_of(heavy, x, w)).total > light.total
    kernel = graph_of(lambda x: jnp.tanh(x) * 2.0, x)
    assert measure.time_graph(kernel, repeats=2, min_sample=1e-4) > measure.EPSILON
    assert len(measure._overheads) == 2       # read again once, not at each timing


def test_a_batch_reads_the_empty_call_again_before_taking_it_off_any_timing(monkeypatch):
    """A reading at 0.9 of a long program's call, and a short program in the same batch
    that reads under it: the long one, timed first, has the empty call taken off as
    read again, not as read before (then it would keep a tenth of its time)."""
    from hlo_opt.cost import measure
    x, w = jnp.ones((512, 1024)), jnp.ones((1024, 1024))
    heavy = graph_of(lambda x, w: x @ w, x, w)           # 1 GFLOP: past `SHORT`, timed alone
    light = graph_of(lambda x: x * 2.0, jnp.ones((8,)))
    alone = measure.time_graph(heavy, repeats=3)
    assert alone > measure.SHORT
    monkeypatch.setattr(measure, "_overheads", [0.9 * (alone + measure.dispatch_overhead())])
    monkeypatch.setattr(measure, "_overhead_read_at", -float("inf"))
    monkeypatch.setattr(measure, "REREAD", float("inf"))     # read again once at most
    again, short = measure.time_graphs([heavy, light], repeats=3)
    assert again > 0.45 * alone and short > measure.EPSILON
    assert len(measure._overheads) == 2


def test_a_program_timed_against_its_reference_is_compiled_before_the_timing(tmp_path,
                                                                             monkeypatch):
    """A compile in `pairing.ratio`'s first turn would be the call it leaves out, and
    leave that turn one call to read."""
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))
    compiled, real = [], pairing.ratio

    def ratio(fn, args, ref, ref_args, **kwargs):
        compiled.append((fn._cache_size(), ref._cache_size()))
        return real(fn, args, ref, ref_args, **kwargs)
    monkeypatch.setattr(pairing, "ratio", ratio)
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    model.cost(graph_of(lambda x, w: x @ w, x, w))
    assert model.cost(graph_of(lambda x, w: jnp.tanh(x @ w) @ w, x, w)).whole
    assert compiled == [(1, 1)]


def test_the_first_graph_of_a_signature_decides_whole_or_summed(tmp_path):
    """Equivalent graphs are all timed whole or all summed, never a mix: a candidate
    timed whole against an original whose kernels were summed compares two different
    measures (SRU's merges read 2x faster that way; they ran 0.9x)."""
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))

    def light(x, w):
        return x @ w

    def heavy(x, w):
        return jnp.tanh(x @ w) @ w
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=0.0)
    assert not model.cost(graph_of(heavy, x, w)).whole     # the first graph: summed
    model.whole.below = 1.0                                 # later graphs look short
    assert not model.cost(graph_of(light, x, w)).whole and model.programs == 0
    fresh = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=1.0)
    assert fresh.cost(graph_of(light, x, w)).whole          # alone, it would be timed whole


def test_a_graphs_new_kernels_are_all_compiled_before_any_is_timed(tmp_path, monkeypatch):
    """Timed right after its own compile, a kernel reads slow (the other core's workers
    asleep): `cost` compiles every kernel it has not timed, then times them together."""
    from hlo_opt.cost import measure
    events = []
    compiled, timed = measure.compiled, measure.sample_size
    monkeypatch.setattr(measure, "compiled",
                        lambda g, seed=0, options=None:
                        events.append("compile") or compiled(g, seed, options))
    monkeypatch.setattr(measure, "sample_size",
                        lambda *a, **k: events.append("time") or timed(*a, **k))
    g = graph_of(lambda x, w, v: jnp.tanh(x @ w) @ v, X, W, W.T)
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=0.0)
    c = model.cost(g)
    kernels = [k for k in c.kernels if k.kernel.kind != "free"]
    assert model.measured == len(kernels) == 3 and all(k.seconds > 0 for k in kernels)
    first = events[:events.index("time")]
    assert first.count("compile") == 3       # all three compiled before the first timing
    assert cost.Measured(tmp_path, repeats=2, min_sample=1e-4,
                         whole_below=0.0).cost(g).total == c.total    # and cached


def test_later_contractions_are_timed_on_the_scale_of_earlier_ones(tmp_path, monkeypatch):
    """A batch with a new dot also times again a dot priced before, and divides its new
    dots' seconds by how much slower that one reads now than then (`TRUST` of it, in
    logs); its loop kernels are stored as timed. The cache then holds one scale however
    the machine's speed moved between batches."""
    from hlo_opt.cost import measure
    batches, slow = [], {}
    time_graphs = measure.time_graphs

    def spy(graphs, **kw):      # the real timings, the anchor's read 3x slower than then
        timed = list(time_graphs(graphs, **kw))
        if slow:
            timed[-1] = 3 * slow["then"]
        batches.append((graphs, timed))
        return timed
    monkeypatch.setattr(measure, "time_graphs", spy)
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=0.0)
    first = model.cost(graph_of(lambda x, w: jnp.tanh(x @ w), X, W))
    (dot,) = [k for k in first.kernels if k.kernel.kind == "contract"]
    slow["then"] = dot.seconds
    second = model.cost(graph_of(lambda x, v: jnp.sin(x @ v), X, jnp.ones((8, 32))))
    graphs, timed = batches[-1]
    assert len(graphs) == 3                     # the new dot and sine, and the old dot
    assert graphs[2].digest == part.isolate(dot.kernel).digest
    by_kind = {k.kernel.kind: k.seconds for k in second.kernels if k.kernel.kind != "free"}
    assert by_kind["contract"] == pytest.approx(timed[0] / 3 ** cost_anchors.TRUST)
    assert by_kind["loop"] == pytest.approx(timed[1])


def test_batches_are_anchored_on_the_shallowest_kernels_so_errors_do_not_compound(
        tmp_path, monkeypatch):
    """Every dot takes 1 ms, but one timed again reads 10% faster than its first timing
    (a steady error of the anchors). Each later batch's new dot is then priced 1/0.9 of
    what it takes (`TRUST` of that, in logs), and no more: its anchors are the first
    batch's dots, scaled by nothing.
    Anchored on the dearest dots priced, each batch's new dot (priced dearest) became
    the next one's anchor, and the error compounded batch on batch."""
    from hlo_opt.cost import measure
    seen = set()

    def time_graphs(graphs, **_):
        out = [1e-3 * (0.9 if g.digest in seen else 1.0) for g in graphs]
        seen.update(g.digest for g in graphs)
        return out
    monkeypatch.setattr(measure, "time_graphs", time_graphs)
    model = cost.Measured(tmp_path, whole_below=0.0)
    first = graph_of(lambda x, a, b, c: jnp.tanh(jnp.tanh(x @ a) @ b) @ c,
                     X, jnp.ones((8, 9)), jnp.ones((9, 10)), jnp.ones((10, 11)))
    assert model.cost(first).total == pytest.approx(5e-3)       # three dots, two loops
    prices = [model.cost(graph_of(lambda x, w: x @ w, X, jnp.ones((8, n)))).total
              for n in range(1, 9)]
    assert prices == pytest.approx([1e-3 / 0.9 ** cost_anchors.TRUST] * 8)


@pytest.mark.parametrize("anchors, scale", [([], 1.0), ([(2.0, 1.0)], 2.0),
                                           ([(2.0, 1.0), (3.0, 2.0), (0.5, 1.0)], 1.5),
                                           ([(ValueError("x"), 1.0), (1.2, 1.0)], 1.2),
                                           ([(0.5, 1.0), (0.8, 1.0), (1.1, 1.0)], 0.8)])
def test_a_batchs_scale_is_how_much_slower_its_anchors_ran(anchors, scale):
    """The median of now / then over the anchors that ran, under 1 too: anchors reading
    faster now were timed in a slow spell, and the batch's new kernels go on that
    scale, the one the kernels they replace were priced on; `TRUST` of it, in logs."""
    assert cost_anchors.scale(anchors) == pytest.approx(scale ** cost_anchors.TRUST)


@pytest.mark.parametrize("median", [0.5, 0.8, 1.25, 2.0])
def test_a_batchs_scale_takes_part_of_its_anchors_reading_not_all(median):
    """The anchors read a batch's spell through their own noise, so the scale goes part
    of the way from 1 towards what they read, on the same side of 1."""
    got = cost_anchors.scale([(median, 1.0)] * 3)
    assert min(1.0, median) < got < max(1.0, median)


def test_a_batchs_programs_are_sampled_in_rounds_not_one_after_another(monkeypatch):
    """The machine's speed moves in spells longer than one program's samples: each round
    takes one sample of every program, so no program is sampled twice running, and
    each program's timing is the least of its samples."""
    from hlo_opt.cost import measure
    order, samples = [], {}
    real = measure._sample

    def sample(fn, args, number, counter):
        seconds, rise = real(fn, args, number, counter)
        order.append(fn)
        samples.setdefault(fn, []).append(seconds)
        return seconds, rise
    monkeypatch.setattr(measure, "_sample", sample)
    fns = [jax.jit(lambda x, k=k: jnp.tanh(x) * k) for k in range(3)]
    calls = [(f, (X,), 2) for f in fns] + [ValueError("would not compile")]
    out = measure.least_in_rounds(calls, repeats=3)
    assert isinstance(out[3], ValueError)
    assert len(order) >= 9 and len(order) % 3 == 0
    assert all(a is not b for a, b in zip(order, order[1:]))
    assert order[:3] == fns
    assert out[:3] == [min(samples[f]) for f in fns]


def test_rounds_with_a_counter_give_its_rise_per_timed_call_in_the_least_sample():
    """The count the memory calibration divides by (page faults) is read around the
    timed calls alone: the untimed call before each sample is not in it."""
    from hlo_opt.cost import measure
    calls = {"n": 0}
    inner = jax.jit(jnp.tanh)

    def fn(x):
        calls["n"] += 1
        return inner(x)
    [(seconds, rise)] = measure.least_in_rounds([(fn, (X,), 3)], repeats=2,
                                                counter=lambda: calls["n"])
    assert rise == 1.0 and 0 < seconds < 1
    [plain] = measure.least_in_rounds([(fn, (X,), 3)], repeats=2)
    assert isinstance(plain, float)


@pytest.mark.parametrize("timed", [0.1e-3, 50e-3])
def test_whether_a_program_is_timed_whole_is_read_off_the_graph_not_off_a_timing(
        tmp_path, timed):
    """"Short" is the graph's kernels under the fixed roofline, the same in every process:
    the first program of its signature is the reference whether its timing reads far
    under `whole_below` or far over it (NasRNN ran 4.7-5.1 ms against a 5 ms line on a
    slow host, and three fresh pricings of four summed it); a graph whose roofline is
    over the line is summed, not timed. The timings are put in the cache, so the
    decision, not the machine, is under test."""
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))
    g = graph_of(lambda x, w: jnp.tanh(x @ w), x, w)
    kernels = [k for k in part.partition(g) if k.kind != "free"]
    line = cost_whole.rough(kernels)

    def model(below):
        m = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, whole_below=below)
        for k in kernels:
            m.cache.put(part.isolate(k).digest, 2e-3 / len(kernels))
        m.cache.put(f"whole:{g.digest}:()", timed)
        return m
    short = model(2 * line)
    c = short.cost(g)
    assert c.whole and c.total == pytest.approx(timed) and short.timed_whole(g, ())
    long = model(line / 2)
    c = long.cost(g)
    assert not c.whole and c.total == pytest.approx(2e-3) and not long.timed_whole(g, ())
    assert short.measured == short.programs == long.measured == long.programs == 0


def test_first_time_timing_stops_once_the_search_is_past_its_limit(tmp_path):
    """Under a search's deadline (`hlo_opt.deadline`), passed: nothing new is compiled
    or timed, neither the kernels nor the program whole; what is cached still prices."""
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))
    g = graph_of(lambda x, w: jnp.tanh(x @ w) * 2.0, x, w)
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    with deadline.stop_when(lambda: True), pytest.raises(deadline.OutOfTime):
        model.cost(g)
    assert model.measured == 0 and model.programs == 0 and not model._isolated
    kernels = [k for k in part.partition(g) if k.kind != "free"]
    for k in kernels:                       # the kernels timed, the program not yet
        model.cache.put(part.isolate(k).digest, 1e-4)
    with deadline.stop_when(lambda: True), pytest.raises(deadline.OutOfTime):
        model.cost(g)
    assert model.measured == 0 and model.programs == 0
    checks = []                             # past it while the program compiled
    with deadline.stop_when(lambda: bool(checks.append(1)) or len(checks) > 1), \
            pytest.raises(deadline.OutOfTime):
        model.cost(g)
    assert model.programs == 0 and len(checks) == 2
    with deadline.stop_when(lambda: False):
        assert model.cost(g).whole and model.programs == 1
    with deadline.stop_when(lambda: True):  # all of it cached now
        assert model.cost(g).whole and model.programs == 1


def test_a_pricing_the_deadline_stops_keeps_the_batches_it_finished(tmp_path, monkeypatch):
    """Under a search's deadline the new kernels are timed `CHUNK` at a time, each batch
    written to disk before the next begins: a pricing stopped midway leaves what it
    timed to the next process, which times only the rest. Timed as one batch, a
    pricing longer than a search's time was lost whole in every process (NASNet-A's
    layout move). With no deadline they are one batch, as before. Either way the
    anchors are timed again once a pricing, with its first batch."""
    monkeypatch.setattr(cost_model, "CHUNK", 2)
    sizes = (256, 128, 96, 64, 48, 32)
    ws = [jnp.full((a, b), 0.01) for a, b in zip(sizes, sizes[1:])]

    def chain(x, *ws):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x
    g = graph_of(chain, jnp.ones((64, 256)), *ws)

    def model(path):
        m = cost.Measured(path, repeats=2, min_sample=1e-4, whole_below=0.0)
        batches, anchors_timed = [], []      # per batch: kernels, anchors timed again
        timed = m._time_batch

        def recorded(todo, again, ran):
            batches.append(len(todo))
            anchors_timed.append(len(again))
            return timed(todo, again, ran)
        m._time_batch = recorded
        return m, batches, anchors_timed

    whole, batches, _ = model(tmp_path / "whole")
    whole.cost(g)
    assert batches == [whole.measured] and whole.measured >= 5
    chunked, batches, _ = model(tmp_path / "chunked")
    with deadline.stop_when(lambda: False):
        chunked.cost(g)
    assert batches == [2] * (whole.measured // 2) + [1] * (whole.measured % 2)
    assert chunked.measured == whole.measured
    stopped, batches, _ = model(tmp_path / "stopped")
    with deadline.stop_when(lambda: stopped.measured >= 2), pytest.raises(deadline.OutOfTime):
        stopped.cost(g)
    assert batches == [2, 2] and stopped.measured == 2 and not stopped._isolated
    after, _, anchors_timed = model(tmp_path / "stopped")   # the next process: two on disk
    assert len(after.cache) == 2
    assert after.cost(g).total > 0 and after.measured == whole.measured - 2
    # the anchors (dots timed before) are timed again once a pricing, with its first batch
    other = (256, 136, 104, 72, 56, 40)    # every dot new
    wider = graph_of(chain, jnp.ones((64, 256)),
                     *[jnp.full((a, b), 0.01) for a, b in zip(other, other[1:])])
    anchors_timed.clear()
    with deadline.stop_when(lambda: False):
        after.cost(wider)
    assert len(anchors_timed) >= 3 and anchors_timed[0] > 0 and not any(anchors_timed[1:])


def test_a_batch_compiled_before_the_limit_takes_no_sample_after_it(monkeypatch):
    """The limit passes once the batch has compiled: no sample is timed after it, and
    every program compiled is released (a search past its limit, left to time the batch
    through, ends that much late)."""
    from hlo_opt.cost import measure
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))
    graphs = [graph_of(f, x, w) for f in (lambda x, w: jnp.tanh(x @ w),
                                          lambda x, w: jnp.exp(x) @ w)]
    compiles, samples, released = [], [], []
    compiled, sample, release = measure.compiled, measure._sample, measure.release
    monkeypatch.setattr(measure, "compiled",
                        lambda *a, **k: compiles.append(1) or compiled(*a, **k))
    monkeypatch.setattr(measure, "_sample", lambda *a, **k: samples.append(1) or sample(*a, **k))
    monkeypatch.setattr(measure, "release", lambda fn: released.append(fn) or release(fn))
    with deadline.stop_when(lambda: len(compiles) == len(graphs)), \
            pytest.raises(deadline.OutOfTime):
        measure.time_graphs(graphs, repeats=2, min_sample=1e-4)
    assert len(compiles) == len(graphs) and not samples
    assert len(released) == len(graphs)


def test_a_batch_keeps_its_order_and_its_failures_when_compiled_side_by_side(monkeypatch):
    """The kernels of a batch compile `COMPILERS` at once (`_compile_all`): each timing
    still comes back in its graph's place, and one that fails to compile is its own
    exception there, the others timed."""
    from hlo_opt.cost import measure
    monkeypatch.setattr(measure, "COMPILERS", 2)
    x = jnp.ones((64, 256))
    sizes = (256, 32, 512, 64, 128)
    graphs = [graph_of(lambda x, n=n: jnp.tanh(x @ jnp.ones((256, n))), x) for n in sizes]
    compiled = measure.compiled

    def failing(graph, seed=0, options=None):
        if graph is graphs[2]:
            raise RuntimeError("no kernel here")
        return compiled(graph, seed, options)
    monkeypatch.setattr(measure, "compiled", failing)
    timed = measure.time_graphs(graphs, repeats=2, min_sample=1e-4)
    assert isinstance(timed[2], RuntimeError)
    rest = [t for i, t in enumerate(timed) if i != 2]
    assert all(isinstance(t, float) and t > 0 for t in rest)
    assert timed[0] > timed[1]          # 64x256 @ 256x256 above 64x256 @ 256x32


def test_a_limit_passed_mid_batch_begins_no_further_compile(monkeypatch):
    """The search's limit passes while a batch compiles, side by side: the compiles not
    begun are not begun, `OutOfTime` is raised, and every program compiled is released."""
    from hlo_opt.cost import measure
    monkeypatch.setattr(measure, "COMPILERS", 2)
    x = jnp.ones((64, 256))
    graphs = [graph_of(lambda x, k=k: jnp.tanh(x * (k + 1.0)) @ jnp.ones((256, 64)), x)
              for k in range(8)]
    compiles, released = [], []
    compiled, release = measure.compiled, measure.release
    monkeypatch.setattr(measure, "compiled",
                        lambda *a, **k: compiles.append(1) or compiled(*a, **k))
    monkeypatch.setattr(measure, "release", lambda fn: released.append(fn) or release(fn))
    with deadline.stop_when(lambda: len(compiles) >= 1), pytest.raises(deadline.OutOfTime):
        measure.time_graphs(graphs, repeats=2, min_sample=1e-4)
    assert 1 <= len(compiles) <= 2 and len(released) == len(compiles)


def test_a_pairing_takes_no_round_after_the_limit(monkeypatch):
    """A short candidate timed whole against its reference: once the search's limit
    passes between rounds, no further round is timed (the pairing ran all its rounds
    after the limit before)."""
    x = jnp.ones((64, 64))
    ours, theirs = jax.jit(lambda x: jnp.tanh(x)), jax.jit(lambda x: jnp.exp(x))
    settled = []            # a short program settles before each of its samples
    settle = pairing.settle
    monkeypatch.setattr(pairing, "settle", lambda *a: settled.append(1) or settle(*a))
    with deadline.stop_when(lambda: len(settled) >= 2), pytest.raises(deadline.OutOfTime):
        pairing.paired(ours, (x,), theirs, (x,), rounds=7, min_sample=1e-4)
    assert len(settled) == 2            # the first round's two samples, then the limit


def test_a_whole_program_is_priced_by_the_median_of_its_turns_least_calls(monkeypatch):
    """`pairing.ratio`: each round ours over theirs, each the least call of a turn of
    `TURN` seconds, ours first in even rounds; the median of the rounds. A limit
    passing mid-pairing stops it before the next round."""
    from hlo_opt.cost import measure
    turns = []
    least = {"ours": iter([2.0, 1.0, 3.0, 9.0]), "ref": iter([1.0, 1.0, 2.0, 9.0])}

    def least_call(fn, args, seconds, most):
        turns.append((fn, seconds))
        assert most == pairing.TURN_CALLS
        return next(least[fn])
    monkeypatch.setattr(measure, "least_call", least_call)
    monkeypatch.setattr(measure, "warm_up", lambda: None)
    assert pairing.ratio("ours", (), "ref", (), rounds=3) == pytest.approx(1.5)  # 2, 1, 1.5
    assert turns == [(f, pairing.TURN) for f in ("ours", "ref", "ref", "ours", "ours", "ref")]
    turns.clear()
    with deadline.stop_when(lambda: len(turns) >= 2), pytest.raises(deadline.OutOfTime):
        pairing.ratio("ours", (), "ref", (), rounds=7)
    assert len(turns) == 2


def test_kernels_of_a_program_timed_whole_are_not_timed_alone(tmp_path):
    """Once graphs of a signature are known to be timed whole, a candidate's new
    kernels are only a breakdown: read from the cache or the roofline, never compiled
    and timed (that cost the search candidates and bought nothing)."""
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4)
    first = model.cost(graph_of(lambda x, w: x @ w, x, w))
    timed = model.measured
    assert first.whole and timed == 1
    other = model.cost(graph_of(lambda x, w: jnp.tanh(x @ w) * 2.0, x, w))
    assert other.whole and model.programs == 2
    assert model.measured == timed               # the tanh-and-scale kernel: not timed
    assert all(k.seconds > 0 for k in other.kernels)    # but still in the breakdown


def test_effectful_kernels_are_priced_without_running_them(tmp_path, capfd):
    def noisy(x):
        jax.debug.print("side effect {}", x.sum())
        return x * 2.0
    g = graph_of(noisy, X)
    model = cost.Measured(tmp_path, repeats=2, min_sample=1e-4, fallback=cost.Analytic())
    total = model.cost(g).total
    assert total > 0 and "side effect" not in capfd.readouterr().out


def test_unknown_cost_model_is_refused():
    with pytest.raises(ValueError, match="unknown cost model 'fast'"):
        cost.make("fast")


@pytest.mark.parametrize("ours, rounds, median, warm", [
    (0.5, 3, 0.5, False), (1.3, 3, 1.3, False), (0.95, 7, 0.95, False), (None, 7, 1.5, False),
    (0.5, 2, 0.5, True), (None, 6, 1.5, True)])
def test_paired_timing_stops_early_only_when_every_round_is_decisive(monkeypatch, ours, rounds,
                                                                     median, warm):
    """The clock is a script: `ours` seconds per call against the reference's 1.0 (None:
    1.5 and 0.5 by turns, each decisive alone but not together; a compiling call shifts
    the turns, and the median with them). `warm`: the first calls
    are a round (one call of a second is a sample long), so one call fewer each; not
    warm, each is called once more first, to compile, and that call is not read."""
    from hlo_opt.cost import measure
    calls = []

    def per_call(fn, args, number):
        calls.append(fn)
        if fn == "ref":
            return 1.0
        if ours is None:
            return (0.5, 1.5)[sum(f == "ours" for f in calls) % 2]
        return ours
    monkeypatch.setattr(measure, "per_call", per_call)
    monkeypatch.setattr(measure, "warm_up", lambda: None)
    ratio, ref = pairing.paired("ours", (), "ref", (), rounds=7, decide=0.99, warm=warm)
    # (the compiling call unless warm,) the warm-up call, then one per round
    assert calls.count("ref") == (not warm) + 1 + rounds
    assert ref == 1.0 and ratio == pytest.approx(median)


def test_paired_timing_of_programs_not_yet_compiled_samples_many_calls():
    """A first call compiles; read as a call it made every sample one call of a 0.1 ms
    program, where `min_sample` asks for 10 ms of them."""
    calls = {"ours": 0, "ref": 0}

    def counted(name, fn):
        jitted = jax.jit(fn)

        def call(*args):
            calls[name] += 1
            return jitted(*args)
        return call
    x, w = jnp.ones((64, 256)), jnp.ones((256, 256))
    ours = counted("ours", lambda x, w: jnp.tanh(x @ w))
    ref = counted("ref", lambda x, w: jax.nn.relu(x @ w))
    ratio, seconds = pairing.paired(ours, (x, w), ref, (x, w), rounds=3, min_sample=10e-3)
    per_sample = 10e-3 / seconds
    assert per_sample > 5                      # (a test on a machine where the call is 2 ms
    assert min(calls.values()) >= 3 * per_sample / 2     # or more would show nothing)
    assert 0 < ratio < 10


@pytest.mark.parametrize("seconds, settled", [(1e-3, 14), (0.5, 0)])
def test_paired_timing_settles_a_short_program_before_each_sample(monkeypatch, seconds,
                                                                   settled):
    """A program shorter than `SETTLE` runs untimed before each of its samples (7
    rounds, two samples each); a longer one does not."""
    from hlo_opt.cost import measure
    runs = []
    monkeypatch.setattr(measure, "per_call", lambda fn, args, number: seconds)
    monkeypatch.setattr(measure, "warm_up", lambda: None)
    monkeypatch.setattr(pairing, "settle", lambda fn, args, s: runs.append((fn, s)))
    pairing.paired("ours", (), "ref", (), rounds=7)
    assert len(runs) == settled and all(s == pairing.SETTLE for _, s in runs)
    assert [fn for fn, _ in runs].count("ours") == settled // 2


@pytest.mark.parametrize("seconds, calls", [(0.0, 1), (1 / 32, 8), (0.033, 9)])
def test_settle_calls_for_the_time_given_and_at_least_once(monkeypatch, seconds, calls):
    """The clock is a script: each call takes 1/256 s (exact in binary)."""
    now, made = [0.0], []

    class Clock:
        @staticmethod
        def perf_counter():
            return now[0]

    def call():
        now[0] += 1 / 256
        made.append(now[0])
    monkeypatch.setattr(pairing, "time", Clock)
    pairing.settle(call, (), seconds)
    assert len(made) == calls


@pytest.mark.parametrize("speeds, calls", [
    ([1.0] * 20, 10),                   # awake: through in `WAKE_CALLS` calls
    ([2.3] * 5 + [1.1] * 20, 11),       # waking: until most of the last ten run fast
    ([2.3] * 2000, None)])              # never back: until the limit
def test_warm_up_runs_the_reference_until_it_is_back_at_its_best_speed(monkeypatch, speeds,
                                                                        calls):
    """The clock is a script: the reference's best is 1 ms, learned by the process's
    first wake (which always runs `FIRST_WAKE` seconds); then each call takes `speeds`
    ms in turn."""
    from hlo_opt.cost import measure
    now, taken = [0.0], []

    class Clock:
        @staticmethod
        def perf_counter():
            return now[0]

    def per_call(fn, args, number, script=iter([1e-3] * 10**6)):
        seconds = next(script)
        now[0] += seconds
        taken.append(seconds)
        return seconds
    monkeypatch.setattr(measure, "time", Clock)
    monkeypatch.setattr(measure, "per_call", per_call)
    monkeypatch.setattr(measure, "_best_reference", None)
    monkeypatch.setattr(measure, "_loaded", None)
    measure.warm_up()
    assert now[0] >= measure.FIRST_WAKE and measure._best_reference == 1e-3
    script = iter(s * 1e-3 for s in speeds)
    monkeypatch.setattr(measure, "per_call", lambda fn, args, n: per_call(fn, args, n, script))
    taken.clear()
    start = now[0]
    measure.warm_up(limit=0.25)
    if calls is None:
        assert 0.25 <= now[0] - start < 0.25 + 3e-3
    else:
        assert len(taken) == calls


def test_a_wake_that_ran_to_its_limit_lets_the_next_stop_at_the_speed_it_reached(monkeypatch):
    """Another program running: the first wake at 2.3x the best speed runs its limit,
    the next ones stop once they run at that speed, until one is back at the best; after
    that, a wake at 2.3x runs its limit again. The clock is a script, as above."""
    from hlo_opt.cost import measure
    now, taken, speeds = [0.0], [], [1.0]

    class Clock:
        @staticmethod
        def perf_counter():
            return now[0]

    def per_call(fn, args, number):
        now[0] += speeds[0] * 1e-3
        taken.append(speeds[0])
        return speeds[0] * 1e-3
    monkeypatch.setattr(measure, "time", Clock)
    monkeypatch.setattr(measure, "per_call", per_call)
    monkeypatch.setattr(measure, "_best_reference", None)
    monkeypatch.setattr(measure, "_loaded", None)
    measure.warm_up()                                    # learns the best: 1 ms

    def wake(speed: float) -> float:
        speeds[0] = speed
        start = now[0]
        taken.clear()
        measure.warm_up(limit=0.25)
        return now[0] - start
    assert wake(2.3) >= 0.25                             # loaded: runs to the limit
    assert wake(2.5) < 0.03 and len(taken) == measure.WAKE_CALLS   # stops at that speed
    assert wake(2.5) < 0.03 and measure._loaded == pytest.approx(2.3e-3)
    assert wake(3.5) >= 0.25                             # slower still: the limit again
    assert measure._loaded == pytest.approx(3.5e-3)
    assert wake(1.0) < 0.02 and measure._loaded is None  # back at its best
    assert wake(2.3) >= 0.25                             # and loaded again: the limit


def test_every_program_compiled_for_a_timing_is_released_but_the_reference(monkeypatch, tmp_path):
    """A timed program's executable outlives the function in jax's caches (and holds
    memory mappings: search_bench crashed at the kernel's limit); each is released when
    its timing is done, except the signature's reference, kept for the next candidate."""
    from hlo_opt.cost import measure
    made, released = [], []
    compiled, release = measure.compiled, measure.release

    def recording(graph, seed=0, options=None):
        fn, args = compiled(graph, seed, options)
        made.append(fn)
        return fn, args
    monkeypatch.setattr(measure, "compiled", recording)
    monkeypatch.setattr(measure, "release", lambda fn: released.append(fn) or release(fn))
    monkeypatch.setattr(pairing, "ratio", lambda *a, **k: 1.0)     # no need to time it
    a = graph_of(lambda x, w: jnp.tanh(x @ w), X, W)
    b = graph_of(lambda x, w: jnp.tanh(x @ (w * 1.0)), X, W)
    measure.time_graphs([a, b], repeats=1, min_sample=1e-4)
    measure.time_whole(a, repeats=1, min_sample=1e-4)
    model = cost.Measured(tmp_path, repeats=1, min_sample=1e-4)
    model.cost(a)                  # the first of its signature: timed whole, the reference
    model.cost(b)                  # timed against the reference, compiled for it
    kept = [fn for fn in made if fn not in released]
    assert len(made) >= 5 and len(kept) == 1
    assert model.whole.references[cost_whole.signature(a, ())][1][0] is kept[0]
