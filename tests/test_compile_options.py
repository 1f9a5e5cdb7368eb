"""XLA compile options chosen per program: applied where the program is compiled (kernel
timings, the per-call program), kept in the report and the disk cache, and an option
this jaxlib does not know is passed over, never fatal."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo_opt
from hlo_opt import capture, compile_options, cost, pipeline
from hlo_opt.cost import measure, pairing
from hlo_opt.frozen import Runner
from hlo_opt.rules import library
from hlo_opt.rules.library import layout as L
from helpers import assert_close

NO_YNN = compile_options.NO_YNN
YNN_ELTWISE = compile_options.YNN_ELTWISE
BOGUS = {"xla_cpu_no_such_flag_for_hlo_opt": "1"}
needs_ynn_choice = pytest.mark.skipif(
    jax.devices()[0].platform != "cpu" or not compile_options.accepted(
        compile_options.label(NO_YNN)), reason="XLA CPU's YNNPACK option is not here")


def net(w, x):
    y = lax.conv_general_dilated(x, w["a"], (1, 1), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y)
    y = lax.conv_general_dilated(y, w["b"], (1, 1), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.mean(jax.nn.relu(y), axis=(1, 2))


W = {"a": jax.random.normal(jax.random.key(0), (3, 3, 16, 32)) * 0.1,
     "b": jax.random.normal(jax.random.key(1), (3, 3, 32, 32)) * 0.1}
X = jax.random.normal(jax.random.key(2), (1, 32, 32, 16))


def _hlo(fn, *args) -> str:
    return fn.lower(*args).compile().as_text()


def test_labels_round_trip():
    assert compile_options.label({}) == "" and compile_options.parse("") == {}
    assert compile_options.parse(compile_options.label(NO_YNN)) == NO_YNN
    assert compile_options.describe(NO_YNN) == "YNNPACK off"
    assert compile_options.parse(compile_options.label(YNN_ELTWISE)) == YNN_ELTWISE
    assert compile_options.describe(YNN_ELTWISE) == "YNNPACK elementwise fusions only"
    assert compile_options.describe({}) == "XLA's defaults"
    assert compile_options.describe(BOGUS) == compile_options.label(BOGUS)


@needs_ynn_choice
def test_the_options_reach_xla_and_leave_the_answer():
    plain = jax.jit(net)
    chosen = compile_options.jit(net, NO_YNN)
    assert "ynn_fusion" in _hlo(plain, W, X) and "ynn_fusion" not in _hlo(chosen, W, X)
    assert_close(chosen(W, X), plain(W, X), 1e-5)


@needs_ynn_choice
def test_with_elementwise_fusions_only_a_lone_dot_is_xla_s_and_a_conv_s_relu_joins_it():
    a, b = jnp.ones((64, 256)), jnp.ones((256, 256))
    dot = jax.jit(lambda a, b: a @ b)
    assert "ynn_fusion" in _hlo(dot, a, b)
    assert "ynn_fusion" not in _hlo(compile_options.jit(lambda a, b: a @ b, YNN_ELTWISE), a, b)
    chosen = compile_options.jit(net, YNN_ELTWISE)
    assert "ynn_fusion" in _hlo(chosen, W, X)
    assert_close(chosen(W, X), jax.jit(net)(W, X), 1e-5)


def test_an_option_xla_does_not_know_is_not_a_choice(monkeypatch):
    monkeypatch.setitem(compile_options.CHOICES, jax.devices()[0].platform, (BOGUS,))
    assert not compile_options.accepted(compile_options.label(BOGUS))
    assert compile_options.choices() == []
    graph = capture.capture(net, (W, X)).graph
    assert pipeline.choose_options(graph, (0, 1), list(jax.tree.leaves((W, X)))) == {}


@needs_ynn_choice
def test_the_choice_is_defaults_or_a_choice_and_its_program_agrees():
    graph = capture.capture(net, (W, X)).graph
    leaves = jax.tree.leaves((W, X))
    chosen = pipeline.choose_options(graph, (0, 1), leaves)
    assert chosen in ({}, *compile_options.choices())
    runner = Runner(graph, (0, 1), chosen)
    assert_close(runner(leaves)[0], jax.jit(net)(W, X), 1e-5)


@needs_ynn_choice
@pytest.mark.parametrize("ratios, chosen", [
    ((0.97, 1.02), {}), ((0.93, 0.97), NO_YNN), ((0.93, 0.80), YNN_ELTWISE)])
def test_an_option_is_taken_only_when_it_wins_by_more_than_a_ties_noise(
        monkeypatch, ratios, chosen):
    """Each choice's paired ratio against XLA's defaults, in the order of `choices`: one
    that reads within `CHOOSE` of a tie keeps the defaults; of two past it, the faster."""
    monkeypatch.setattr(compile_options, "choices", lambda platform=None: [NO_YNN, YNN_ELTWISE])
    read = iter(ratios)
    monkeypatch.setattr(pairing, "paired", lambda *args, **kwargs: (next(read), 1.0))
    graph = capture.capture(net, (W, X)).graph
    assert pipeline.choose_options(graph, (0, 1), list(jax.tree.leaves((W, X)))) == chosen


def nchw_net(w, x):
    y = lax.conv_general_dilated(x, w["a"].transpose(3, 2, 0, 1), (1, 1), "SAME")
    y = lax.conv_general_dilated(jax.nn.relu(y), w["b"].transpose(3, 2, 0, 1), (1, 1), "SAME")
    return jnp.mean(jax.nn.relu(y), axis=(2, 3))


def _nchw_convs(graph) -> int:
    return sum(n.op == "conv_general_dilated" and n.params["dimension_numbers"] == L.NCHW
               for n in graph.nodes)


def test_the_options_are_chosen_on_the_graph_the_search_is_headed_for():
    x = X.transpose(0, 3, 1, 2)
    graph = capture.capture(nchw_net, (W, x)).graph
    relaid = pipeline.probe(graph, library.ALL)
    assert _nchw_convs(graph) == 2 and _nchw_convs(relaid) == 0
    assert_close(Runner(relaid, (0, 1))(jax.tree.leaves((W, x)))[0], jax.jit(nchw_net)(W, x),
                 1e-5)
    no_layout = [r for r in library.ALL if r.name != "conv-to-nhwc"]
    assert pipeline.probe(graph, no_layout) is graph            # the rules cannot relay it
    nhwc = capture.capture(net, (W, X)).graph
    assert pipeline.probe(nhwc, library.ALL) is nhwc             # nothing to relay


@needs_ynn_choice
def test_choose_options_times_the_probe(monkeypatch):
    timed = []

    class Recording(Runner):
        def __init__(self, graph, *args, **kwargs):
            timed.append(graph)
            super().__init__(graph, *args, **kwargs)
    monkeypatch.setattr(pipeline, "Runner", Recording)
    x = X.transpose(0, 3, 1, 2)
    graph = capture.capture(nchw_net, (W, x)).graph
    assert pipeline.choose_options(graph, (0, 1), jax.tree.leaves((W, x))) in ({}, *compile_options.choices())
    assert [g.digest for g in timed] == [pipeline.probe(graph, library.ALL).digest]


@needs_ynn_choice
def test_kernels_are_timed_under_the_options_in_a_cache_file_of_their_own(tmp_path):
    graph = capture.capture(net, (W, X)).graph
    plain = cost.Measured(tmp_path)
    chosen = cost.Measured(tmp_path, compiler_options=NO_YNN)
    assert plain.cache.path != chosen.cache.path
    priced = chosen.cost(graph, (0, 1))
    assert priced.total > 0 and chosen.measured > 0 and len(chosen.cache) > 0
    assert len(plain.cache) == 0                    # nothing written under the defaults
    fn, _ = measure.compiled(graph, options=NO_YNN)
    assert "ynn_fusion" not in _hlo(fn, *jax.tree.leaves((W, X)))


@needs_ynn_choice
def test_the_chosen_options_compile_the_program_that_runs_and_come_back_from_disk(
        tmp_path, monkeypatch):
    # Which options win, and whether the result beats jax.jit, is the device's to say;
    # here both are fixed, to follow the choice through the report, the per-call
    # program and the graph cache.
    monkeypatch.setattr(pipeline, "choose_options", lambda *args: dict(NO_YNN))
    monkeypatch.setattr(pipeline, "FASTER", float("inf"))
    monkeypatch.setattr(pipeline, "SHORT_SEARCHES", 1)   # stored even if cut short
    first = hlo_opt.jit(net, frozen_argnums=(0,), cache_dir=tmp_path, time_limit=2.0)
    want = jax.jit(net)(W, X)
    assert_close(first(W, X), want, 1e-5)
    report = first.explain(W, X)
    assert not report.fell_back and report.compiler_options == NO_YNN
    (entry,) = first._entries.values()
    assert entry.runner.options == NO_YNN
    assert "ynn_fusion" not in _hlo(entry.runner._runtime, *entry.runner.runtime_args(
        jax.tree.leaves((W, X)))[1])
    monkeypatch.setattr(pipeline, "choose_options", lambda *args: {})
    again = hlo_opt.jit(net, frozen_argnums=(0,), cache_dir=tmp_path, time_limit=2.0)
    assert again.explain(W, X).stop_reason == "cached"
    assert again.explain(W, X).compiler_options == NO_YNN
    np.testing.assert_allclose(np.asarray(again(W, X)), np.asarray(first(W, X)), rtol=0)


@needs_ynn_choice
def test_a_search_after_one_cut_short_is_priced_under_the_options_that_one_chose(
        tmp_path, monkeypatch):
    # Timed again, the choice can go the other way (NASNet-A: XLA's defaults in one
    # process, YNNPACK's elementwise fusions in the next), and the kernel timings the
    # first search cached, under its options, would not serve the second.
    chose = []
    monkeypatch.setattr(pipeline, "choose_options",
                        lambda *args: chose.append(1) or dict(NO_YNN))
    monkeypatch.setattr(pipeline, "cut_short", lambda *args: True)
    monkeypatch.setattr(pipeline.SearchClock, "kept", lambda self: 1)
    monkeypatch.setattr(pipeline, "SHORT_SEARCHES", 2)
    monkeypatch.setattr(pipeline, "FASTER", float("inf"))

    def search():
        f = hlo_opt.jit(net, frozen_argnums=(0,), cache_dir=tmp_path, time_limit=2.0)
        assert_close(f(W, X), jax.jit(net)(W, X), 1e-5)
        return f.explain(W, X)
    first = search()
    assert first.compiler_options == NO_YNN and first.stop_reason != "cached"
    monkeypatch.setattr(pipeline, "choose_options",
                        lambda *args: chose.append(2) or dict(YNN_ELTWISE))
    second = search()      # the last of SHORT_SEARCHES: stored though cut short
    assert second.stop_reason != "cached" and second.compiler_options == NO_YNN
    assert chose == [1]
    assert search().stop_reason == "cached" and chose == [1]


@needs_ynn_choice
def test_a_program_kept_as_the_original_runs_as_jax_jit_compiles_it(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "choose_options", lambda *args: dict(NO_YNN))
    monkeypatch.setattr(pipeline, "FASTER", 0.0)          # nothing beats jax.jit here
    f = hlo_opt.jit(net, frozen_argnums=(0,), cache_dir=tmp_path, time_limit=2.0)
    report = f.explain(W, X)
    assert report.fell_back and report.compiler_options == {}
    (entry,) = f._entries.values()
    assert entry.runner is None
    assert_close(f(W, X), jax.jit(net)(W, X), 1e-6)


@needs_ynn_choice
def test_a_graph_left_as_it_was_is_still_verified_under_chosen_options(tmp_path, monkeypatch):
    compared = []
    real = pipeline.check.compare

    def recording(*args, **kwargs):
        compared.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(pipeline.check, "compare", recording)
    monkeypatch.setattr(pipeline, "choose_options", lambda *args: dict(YNN_ELTWISE))
    monkeypatch.setattr(pipeline, "FASTER", float("inf"))
    f = hlo_opt.jit(net, frozen_argnums=(0,), cache_dir=tmp_path, rules=[], time_limit=2.0)
    report = f.explain(W, X)
    assert report.applied == {} and report.compiler_options == YNN_ELTWISE
    assert len(compared) == 1                    # no rewrite, one check all the same
    monkeypatch.setattr(pipeline.check, "compare", lambda *args, **kwargs: "(made to differ)")
    g = hlo_opt.jit(net, frozen_argnums=(0,), cache_dir=tmp_path / "b", rules=[],
                    time_limit=2.0)
    report = g.explain(W, X)
    assert report.fell_back and report.compiler_options == {} and "verify" in report.reason
    assert_close(g(W, X), jax.jit(net)(W, X), 1e-6)
