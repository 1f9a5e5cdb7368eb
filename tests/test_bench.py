"""The benchmark harness: its error measure, its interleaving, its reports, and the
scripts themselves run end to end (so they cannot rot). Nothing here asserts a speed."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import bench
import fidelity_stats
import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD_KEYS = {"model", "config", "ms", "speedup", "first_call_s", "optimise_s", "search_s",
               "applied", "max_abs_error", "rel_error", "agree", "number", "repeats",
               "fell_back", "stop_reason", "compiled_with"}


def _run(*argv, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT)     # this checkout, not an installed copy
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_agreement_is_max_abs_error_over_max_magnitude():
    ref = {"a": np.array([1.0, -4.0]), "b": np.array([[2.0]])}
    out = {"a": np.array([1.5, -4.0]), "b": np.array([[1.0]])}
    assert bench.agreement(ref, out) == (1.0, 0.25)
    assert bench.agreement(ref, ref) == (0.0, 0.0)
    with pytest.raises(AssertionError, match="structure or shape"):
        bench.agreement(ref, {"a": np.zeros(2), "b": np.zeros(3)})


def test_interleaving_alternates_order_and_summarises_ratios():
    calls = []
    contenders = {name: (lambda name=name: calls.append(name) or np.zeros(()))
                  for name in ("A", "B", "C")}
    result = bench.interleaved(contenders, (), repeats=4)
    n = result["number"]
    timed = calls[-4 * 3 * n:]
    rounds = [timed[i * 3 * n:(i + 1) * 3 * n:n] for i in range(4)]
    assert rounds == [["A", "B", "C"], ["C", "B", "A"]] * 2
    assert set(result["ms"]) == {"A", "B", "C"} and set(result["speedup"]) == {"B", "C"}
    for s in result["speedup"].values():
        assert 0 < s["min"] <= s["median"] <= s["max"] and len(s["ratios"]) == 4


@pytest.mark.parametrize("within, most, rounds", [
    (0.0, 27, 3),      # no time given: the rounds asked for
    (9.5, 27, 9),      # 1 s a round: a 10th would end at 10 s, past 9.5
    (10.0, 5, 5),      # at most `most`
    (100.0, 2, 3)])    # never fewer than asked
def test_interleaving_adds_rounds_while_they_fit_in_the_time_given(monkeypatch, within,
                                                                   most, rounds):
    clock = [0.0]
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(bench, "per_call", lambda f, args, number: f() or 0.01)

    def contender():                  # each sample of A or B takes half a second
        clock[0] += 0.5
    result = bench.interleaved({"A": contender, "B": contender}, (), repeats=3,
                               within=within, most=most)
    assert result["repeats"] == rounds
    assert len(result["speedup"]["B"]["ratios"]) == rounds


def _scripted(monkeypatch, **durations):
    """A clock and, per name, a program whose calls take its `durations` seconds of it,
    one by one; the scripts are emptied as the calls are made."""
    clock, left = [0.0], {name: list(d) for name, d in durations.items()}

    def program(name):
        def run():
            clock[0] += left[name].pop(0)
            return np.zeros(())
        return run
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    return {name: program(name) for name in durations}, left


@pytest.mark.parametrize("durations, seconds, least, calls", [
    ([0.05, 0.3, 0.1, 0.2, 9.0], 0.6, 0.1, 4),   # the fast first call left out; stops at 0.6 s
    ([0.05, 0.3, 9.0], 0.0, 0.3, 2),             # two calls however short the turn
    ([0.4, 0.2, 9.0], 0.5, 0.2, 2)])             # the turn ends once its time is up
def test_least_call_is_the_least_call_after_the_first(monkeypatch, durations, seconds,
                                                      least, calls):
    programs, left = _scripted(monkeypatch, p=durations)
    assert bench.least_call(programs["p"], (), seconds) == pytest.approx(least)
    assert len(durations) - len(left["p"]) == calls


def test_least_call_stops_at_most_calls(monkeypatch):
    programs, left = _scripted(monkeypatch, p=[0.05, 0.3, 0.2, 0.1, 9.0])
    assert bench.least_call(programs["p"], (), 10.0, most=3) == pytest.approx(0.2)
    assert left["p"] == [0.1, 9.0]


def test_interleaving_with_least_takes_each_turns_least_call(monkeypatch):
    # each: its warm-up call and the call choosing the sample size, then its two turns
    # of a second (round 1: A B, round 2: B A), each its calls until the second is up
    programs, left = _scripted(monkeypatch, A=[1.0, 1.0] + [0.3, 0.5, 0.7] + [0.2, 0.6, 0.8],
                               B=[2.0, 2.0] + [0.2, 1.0] + [0.1, 0.8, 1.1])

    def one_call(f, args, number):      # the call choosing the sample size: one of each
        f()
        return 1.0
    monkeypatch.setattr(bench, "per_call", one_call)
    result = bench.interleaved(programs, (), repeats=2, settle=1.0, least=True)
    assert result["ms"] == {"A": pytest.approx(550.0), "B": pytest.approx(900.0)}
    assert result["speedup"]["B"]["ratios"] == [pytest.approx(0.5), pytest.approx(0.75)]
    assert left == {"A": [], "B": []}


def _record(**extra):
    return {"model": "m", "config": {"batch": 1, "layout": "NHWC", "dtype": "bfloat16",
                                     "train": True},
            "ms": {"jax.jit": 2.0, "hlo_opt": 1.0},
            "speedup": {"hlo_opt": {"median": 2.0, "min": 1.5, "max": 2.5}},
            "rel_error": {"hlo_opt": 0.0}, "optimise_s": 1.0, "search_s": 0.5,
            "applied": {"b-rule": 1, "a-rule": 2}, "failures": {}, **extra}


@pytest.mark.parametrize("ratios, sign", [
    ([1.1] * 7, 1), ([0.9] * 6 + [1.2], 0), ([0.8] * 12 + [1.1] * 3, -1),
    ([0.8] * 11 + [1.1] * 4, 0), ([1.0] * 9, 0), ([1.05, 0.95] * 8, 0)])
def test_a_sign_is_called_only_when_the_rounds_decide_it(ratios, sign):
    """A two-sided sign test at 5%: 7 of 7 rounds, or 12 of 15, on one side of 1."""
    assert bench.sign_of(ratios) == sign


def test_fidelity_counts_only_the_pairs_the_rounds_order():
    # Per-round speed-ups over variant 0: variant 1 is 1.3x faster in every round,
    # variant 2 is level with 0 (noise either way), so only pairs (0,1) and (1,2) are
    # decided; the model below gets (0,1) right and (1,2) wrong.
    ratios = [[1.0] * 7, [1.3] * 7, [1.05, 0.95] * 3 + [1.0]]
    predicted = [2.0, 1.5, 1.0]
    assert fidelity_stats.decided_pairs(predicted, ratios) == (3, 2, 1)


def test_split_half_ranks_the_measurement_against_itself():
    # Three variants 1.0x, 1.5x, 2.0x faster than variant 0 in every round: both halves
    # rank them alike. Swap variants 2 and 3 in the odd rounds: the halves disagree.
    steady = [[1.0] * 6, [1.0] * 6, [1.5] * 6, [2.0] * 6]
    assert fidelity_stats.split_half(steady) == pytest.approx(1.0)
    swapped = [[1.0] * 6, [1.0] * 6, [1.5, 2.0] * 3, [2.0, 1.5] * 3]
    assert fidelity_stats.split_half(swapped) < 0.9


def test_a_perfect_models_expected_spearman_follows_the_measurements_own_agreement():
    # Halves that agree fully: a perfect model is expected to agree fully; halves at
    # r = 0.6: all rounds are 2r/(1+r) = 0.75 reliable, a perfect model's Spearman
    # sqrt(0.75); halves that disagree give no estimate.
    assert fidelity_stats.ceiling(1.0) == pytest.approx(1.0)
    assert fidelity_stats.ceiling(0.6) == pytest.approx(0.75 ** 0.5)
    assert np.isnan(fidelity_stats.ceiling(-0.2)) and np.isnan(fidelity_stats.ceiling(float("nan")))


def test_spearman_ranks_tied_prices_level_not_by_their_order():
    # two variants priced alike (BERT makes the same merge twice): neither is ranked
    # first, so the order their times happen to fall in earns nothing
    assert fidelity_stats.spearman([1.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(0.75 ** 0.5)
    assert fidelity_stats.spearman([1.0, 1.0, 2.0], [2.0, 1.0, 3.0]) == pytest.approx(0.75 ** 0.5)
    assert np.isnan(fidelity_stats.spearman([1.0, 1.0], [1.0, 2.0]))


def test_a_model_exact_on_each_kind_of_variant_reads_below_one_where_a_kinds_order_counts():
    names = ["original", "merge-2-of-3 #1", "merge-8-of-3 #2", "split-in-2 #3", "split-in-4 #4"]
    # The kinds apart and each kind's variants in order: tied within a kind, such a model
    # ranks the kinds right and the variants of a kind level.
    apart = [1.0, 0.90, 0.91, 1.10, 1.12]
    assert 0.9 < fidelity_stats.kinds_exact(names, apart) < 1.0
    # A kind's variants spread over the others' times: level within it, it reads far lower.
    spread = [1.0, 0.80, 1.20, 1.10, 0.85]
    assert fidelity_stats.kinds_exact(names, spread) < 0.5
    # One variant a kind: exact, so it reads 1; a single kind orders nothing.
    assert fidelity_stats.kinds_exact(["original", "a #1", "b #2"], [1.0, 2.0, 3.0]) \
        == pytest.approx(1.0)
    assert np.isnan(fidelity_stats.kinds_exact(["x-1 #1", "x-2 #2"], [1.0, 2.0]))


def test_scaling_growth_is_the_log_log_slope_per_series():
    # seconds = c * ops^k: a slope of k, each series on its own.
    series = [{"series": "linear", "ops": n, "seconds": 0.01 * n} for n in (10, 20, 40)]
    series += [{"series": "square", "ops": n, "seconds": 1e-4 * n * n} for n in (10, 30)]
    series += [{"series": "one point", "ops": 5, "seconds": 1.0}]
    assert bench.growth(series) == {"linear": pytest.approx(1.0),
                                    "square": pytest.approx(2.0)}


def test_scaling_line_is_intercept_and_seconds_per_operation_per_series():
    # seconds = -1 + 0.02 * ops: linear growth (each operation adds 20 ms), yet its
    # log-log slope reads above 1, which is why the report gives both.
    series = [{"series": "offset", "ops": n, "seconds": -1 + 0.02 * n} for n in (84, 108, 156)]
    series += [{"series": "one point", "ops": 5, "seconds": 1.0}]
    (a, b), = bench.line(series).values()
    assert list(bench.line(series)) == ["offset"]
    assert a == pytest.approx(-1.0) and b == pytest.approx(0.02)
    assert bench.growth(series)["offset"] > 1.2


def _seeded(family, sizes, seconds, rng, spread, seeds) -> list[dict]:
    """A made-up scaling series: per size, `seeds` runs off `seconds(size)` by a seeded
    uniform +-`spread` (relative)."""
    return [{"series": family, "ops": n, "seconds": seconds(n),
             "runs": list(seconds(n) * (1 + spread * rng.uniform(-1, 1, seeds)))}
            for n in sizes]


def test_scaling_bend_tells_a_stem_offset_from_growth_faster_than_linear():
    # Six seeds per point, each off the curve by a seeded +-5%: seconds linear in the
    # size above a cheap stem (a slope above 1, no bend), and seconds growing with the
    # square of it (the seconds per operation double, with an interval above zero).
    rng = np.random.default_rng(0)
    sizes = (84, 108, 132, 156)
    series = _seeded("offset", sizes, lambda n: -1 + 0.02 * n, rng, 0.05, 6)
    series += _seeded("square", sizes, lambda n: 1e-4 * n * n, rng, 0.05, 6)
    bend = bench.bend(series)
    assert bench.growth(series)["offset"] > 1.2
    lo, hi, dl, dh = bend["offset"]
    assert lo == pytest.approx(0.02, rel=0.5) and hi == pytest.approx(0.02, rel=0.5)
    assert dl < 0 < dh
    lo, hi, dl, dh = bend["square"]
    assert lo == pytest.approx(2e-4 * 84, rel=0.2) and hi == pytest.approx(2e-4 * 156, rel=0.2)
    assert 0 < dl < dh
    # Medians alone (no runs): the parabola, but no interval.
    medians = [{k: v for k, v in s.items() if k != "runs"} for s in series]
    assert np.isnan(bench.bend(medians)["square"][2])
    assert bench.bend(medians)["square"][1] == pytest.approx(2e-4 * 156)


def test_scaling_ends_bound_the_growth_between_the_smallest_and_largest_size():
    # Eight seeds per point, each off the curve by a seeded +-20%: seconds on a line
    # through a dear stem (per operation the ends' ratio is below 1, its interval too),
    # and seconds growing with the square (the ratio is the sizes', interval above 1).
    rng = np.random.default_rng(1)
    sizes = (24, 66, 122, 234)
    series = _seeded("stem", sizes, lambda n: 0.2 + 0.01 * n, rng, 0.2, 8)
    series += _seeded("square", sizes, lambda n: 1e-4 * n * n, rng, 0.2, 8)
    series += _seeded("one size", (5,), lambda n: 1.0, rng, 0.2, 8)
    ends = bench.ends(series)
    assert list(ends) == ["stem", "square"]
    ratio, lo, hi = ends["stem"]
    assert ratio == pytest.approx((0.2 / 234 + 0.01) / (0.2 / 24 + 0.01), rel=0.15)
    assert lo < ratio < hi < 1
    ratio, lo, hi = ends["square"]
    assert ratio == pytest.approx(234 / 24, rel=0.15) and 1 < lo < ratio < hi
    assert bench.ends(series) == ends                      # seeded: the same interval
    # One run at an end (medians alone): the ratio, no interval.
    medians = [{k: v for k, v in s.items() if k != "runs"} for s in series]
    ratio, lo, hi = bench.ends(medians)["square"]
    assert ratio == pytest.approx(234 / 24) and np.isnan(lo) and np.isnan(hi)


def test_scaling_ends_tell_linear_time_from_n_log_n():
    # Twelve seeds per point, +-5%: seconds through the origin read about 1 at the ends,
    # with an interval that tops out under n log n's ratio; seconds growing as n log n
    # read that ratio.
    rng = np.random.default_rng(2)
    sizes = (84, 108, 132, 156)
    series = _seeded("linear", sizes, lambda n: 5e-3 * n, rng, 0.05, 12)
    series += _seeded("n log n", sizes, lambda n: 1e-3 * n * np.log(n), rng, 0.05, 12)
    series += _seeded("one size", (5,), lambda n: 1.0, rng, 0.05, 12)
    nlogn = bench.nlogn(series)
    assert list(nlogn) == ["linear", "n log n"]
    assert nlogn["linear"] == pytest.approx(np.log(156) / np.log(84))
    ratio, lo, hi = bench.ends(series)["linear"]
    assert ratio == pytest.approx(1, abs=0.03) and hi < nlogn["linear"]
    ratio, lo, hi = bench.ends(series)["n log n"]
    assert ratio == pytest.approx(nlogn["n log n"], rel=0.05) and 1 < lo


def test_at_most_linear_is_shown_by_the_ends_or_by_a_bend_down_and_by_neither_else():
    # Twelve seeds per point, +-5%, Inception's sizes: a dear stem (per operation the
    # ends fall: "ends"); a cheap stem under a bend down (the ends rise, as a cheap stem
    # makes them, but each operation adds less than the one before: "bend"); a straight
    # line through a negative intercept (linear, yet neither test can show it); and the
    # square (shown by neither, as it must not be). Each interval is 95%: one draw of
    # noise in forty shows a straight line bent (seed 3 here did).
    rng = np.random.default_rng(6)
    sizes = (84, 108, 132, 156)
    series = _seeded("stem", sizes, lambda n: 1 + 0.01 * n, rng, 0.05, 12)
    series += _seeded("bends down", sizes, lambda n: -3 + 0.06 * n - 1.5e-4 * n * n,
                      rng, 0.05, 12)
    series += _seeded("offset", sizes, lambda n: -1 + 0.02 * n, rng, 0.05, 12)
    series += _seeded("square", sizes, lambda n: 1e-4 * n * n, rng, 0.05, 12)
    series += _seeded("one size", (5,), lambda n: 1.0, rng, 0.05, 12)
    shown = bench.at_most_linear(series)
    assert shown == {"stem": ["ends"], "bends down": ["bend"], "offset": [], "square": []}
    assert bench.ends(series)["bends down"][1] > 1          # the ends alone cannot say it


def test_table_shows_each_column_and_omits_a_missing_peer():
    text = bench.table([_record(), bench.failed("bert", RuntimeError("boom"), batch=1,
                                                dtype="float32")])
    head, _, row, failed = text.splitlines()
    assert "enzyme" not in head and head.count("|") == 10
    assert "| m | b1 NHWC bf16 train | 2.000 | 1.000 | 2.00x (1.50–2.50) |" in row
    assert "a-rule×2, b-rule×1" in row
    assert "failed: RuntimeError: boom" in failed
    peer = _record(failures={"enzyme": "ValueError: unsupported"})
    assert "failed" in bench.table([peer]).splitlines()[2] and \
        "enzyme ms" in bench.table([peer]).splitlines()[0]


def test_readme_section_is_rewritten_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    begin, end = bench.markers("bench_all")
    readme.write_text(f"# x\n{begin}\nold table\n{end}\ntail\n")
    bench.rewrite_readme("bench_all", "new table\n", str(readme))
    assert readme.read_text() == f"# x\n{begin}\nnew table\n{end}\ntail\n"
    (tmp_path / "bare.md").write_text("no markers")
    with pytest.raises(SystemExit, match="no <!-- bench_all:begin -->"):
        bench.rewrite_readme("bench_all", "t", str(tmp_path / "bare.md"))


def test_the_readme_has_the_bench_section():
    text = open(os.path.join(ROOT, "README.md")).read()
    assert all(m in text for m in bench.markers("bench_all")) and "## Benchmarks" in text


@pytest.mark.slow        # 4 minutes on 2 cores: every model, searched and timed
def test_bench_all_quick_writes_the_three_files(tmp_path):
    result = _run("examples/bench_all.py", "--quick", "--train", "--repeats=2",
                  "--time_limit=1", f"--out={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    assert {"device_kind", "platform", "jax"} <= set(data["environment"])
    runs = [(r["model"], r["config"]["train"]) for r in data["results"]]
    assert runs == [(n, False) for n in models.NAMES] + [("resnet50", True), ("bert", True)]
    for r in data["results"]:
        assert RECORD_KEYS <= set(r), r.get("error")
        assert r["agree"]["hlo_opt"] and r["config"]["small"]
    md = (tmp_path / "results.md").read_text()
    assert all(f"| {n} |" in md for n in models.NAMES)
    assert (tmp_path / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# One script (the quickest) in CI's fast run, the rest under -m slow (2.5 minutes).
@pytest.mark.parametrize("name", [n if n == "nasrnn" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in models.NAMES])
def test_each_model_script_runs(name, tmp_path):
    out = tmp_path / "r.json"
    result = _run(f"examples/{name}.py", "--small", "--repeats=1", "--batch=2",
                  "--time_limit=1", f"--json={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = json.loads(out.read_text())["results"]
    assert record["model"] == name and record["config"]["batch"] == 2
    assert f"| {name} |" in result.stdout and "speedup" in result.stdout


@pytest.mark.parametrize("timing", [0.0, 600.0])
def test_warm_ups_stop_once_they_have_spent_their_timing(tmp_path, timing):
    """On an empty cache the first search times kernels; with timing left a second runs
    and, the cache warm, times nothing new; with none left the calls stop after one (a
    greedy warm-up of NasRNN, timed whole, compiled programs for over 4 minutes). The
    searches have no time limit: each runs to the end on any machine's speed."""
    import jax.numpy as jnp
    from hlo_opt import capture, cost, rules
    from hlo_opt.search import search
    w, x = jnp.ones((64, 64)), jnp.ones((8, 64))
    graph = capture.capture(lambda w, x: jnp.tanh(x @ w) * 2.0 + 1.0, (w, x)).graph
    model = cost.Measured(tmp_path, repeats=1, min_sample=1e-4)

    def warm_up(_left):
        return search(graph, rules.ALL, lambda g: model.cost(g, (0,)).total,
                      algorithm="greedy", time_limit=None, fixed=(0,))
    result, calls = bench.until_quiet(model, 5, warm_up, timing=timing)
    assert result.stats["costed"] > 0 and model.measured + model.programs > 0
    assert calls == (1 if timing == 0.0 else 2)


@pytest.mark.slow        # a search and four contenders timed: 40 s on 2 cores
def test_call_cost_times_the_call_and_what_it_runs(tmp_path):
    result = _run("examples/call_cost.py", "--models=sru", "--small", "--repeats=2",
                  "--time_limit=1", f"--out={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = json.loads((tmp_path / "results.json").read_text())["results"]
    assert record["model"] == "sru" and record["rel_error"] <= record["tolerance"]
    assert set(record["ms"]) == {"jax.jit", "hlo_opt.jit call", "its per-call program",
                                 "jax.jit on flat leaves"}
    assert "| sru |" in (tmp_path / "results.md").read_text()


def test_a_kept_run_is_rescored_from_its_kernel_timings(tmp_path):
    """`--rescore`: the variants made again, priced from the run's cache with nothing
    timed, to the same prices, scored against the run's measurements; a run of other
    variants is refused."""
    import cost_fidelity
    import variants as V
    from hlo_opt import cost
    graph, _, frozen_inputs = cost_fidelity.captured("sru", small=True)
    found = V.variants(graph, 4, fixed=frozen_inputs)
    model = cost.Measured(tmp_path)
    predicted = [model.cost(g, frozen_inputs).total for _, g in found]
    measured = [1.0, 0.5, 2.0, 0.7]
    record = {"model": "sru", "small": True, "compiler_options": "", "spearman": 0.0,
              "speedup_error_median": 0.0,
              "variants": [{"name": n, "measured_s": m, "speedup_by_round": [measured[0] / m] * 6}
                           for (n, _), m in zip(found, measured)]}
    r = cost_fidelity.rescore(record, str(tmp_path))
    assert r["timed"] == 0 and r["predicted_s"] == predicted
    # NaN on both sides where the small variants' prices all tie (`spearman` ranks ties
    # level since b1bdf3c): CI at 181b2ea met that
    assert r["spearman"] == pytest.approx(fidelity_stats.spearman(predicted, measured),
                                          nan_ok=True)
    record["variants"][1]["name"] = "not a variant this code makes"
    with pytest.raises(ValueError, match="sru"):
        cost_fidelity.rescore(record, str(tmp_path))


def test_pooled_runs_score_the_last_runs_prices_against_all_their_measurements():
    """`--pooled`: each variant's time over its run's original, averaged (geometrically)
    over the runs compiled as the scored one was; a run compiled otherwise is left out,
    and a run of other variants is refused."""
    names = ["original", "a #1", "b #2", "c #3"]
    truth = [1.0, 0.8, 0.6, 0.4]

    def run(measured, options="", predicted=truth):
        return {"model": "m", "compiler_options": options,
                "spearman": fidelity_stats.spearman(predicted, measured),
                "variants": [{"name": n, "measured_s": s, "predicted_s": p, "repriced_s": p}
                             for n, s, p in zip(names, measured, predicted)]}
    slow_hour = run([2.0, 1.16, 1.24, 0.80])      # twice as slow, a and b swapped
    other = run([1.0, 0.1, 0.5, 2.0], options='{"x": "y"}')     # reversed: left out
    steady = run(truth)
    scored = run([1.0, 0.80, 0.60, 0.61])          # b and c swapped
    r = fidelity_stats.pooled([slow_hour, other, steady, scored])
    assert scored["spearman"] < 1 and r["run_spearman"] == scored["spearman"]
    assert r["spearman"] == pytest.approx(1.0) and r["repriced"] == pytest.approx(1.0)
    assert r["kinds_exact"] == pytest.approx(1.0)       # one variant a kind: exact
    assert (r["runs"], r["left_out"]) == (3, 1)
    # slow hour against steady 0.8, against scored 0.4; steady against scored 0.8
    assert r["between"] == pytest.approx((0.4, 0.8, 0.8))
    assert fidelity_stats.pooled([other, scored])["between"] is None
    renamed = run(truth)
    renamed["variants"][3]["name"] = "d #3"
    with pytest.raises(ValueError, match="variants"):
        fidelity_stats.pooled([renamed, scored])


def test_cost_fidelity_keeps_the_models_done_so_far_whole(tmp_path):
    """`keep`: the partial report, rewritten after each model, is the latest whole
    file in the report's shape, with no temp file left beside it."""
    import cost_fidelity
    out = tmp_path / "run"
    cost_fidelity.keep([{"model": "a"}], str(out))
    cost_fidelity.keep([{"model": "a"}, {"model": "b"}], str(out))
    kept = json.loads((out / cost_fidelity.PARTIAL).read_text())
    assert [m["model"] for m in kept["models"]] == ["a", "b"] and kept["sign_cases"] == []
    assert [p.name for p in out.iterdir()] == [cost_fidelity.PARTIAL]


@pytest.fixture
def fidelity():
    """`cost_fidelity`, its flags parsed (at their defaults) for the test and left as
    the test found them."""
    import cost_fidelity
    parsed = cost_fidelity.FLAGS.is_parsed()
    if not parsed:
        cost_fidelity.FLAGS(["cost_fidelity"])
    yield cost_fidelity
    cost_fidelity.FLAGS.unparse_flags()
    if parsed:
        cost_fidelity.FLAGS(["cost_fidelity"])


def test_a_models_process_is_handed_every_measurement_flag_of_the_run(fidelity):
    """`child_command`: parsed as the model's process parses it, the command holds the
    run's value of every flag of the script but those `NOT_PASSED` names (`--agree` was
    left behind until 1c02104), and the model, cache and output it is given. A flag added
    to the script fails here until it is set below or named in `NOT_PASSED`."""
    from absl.testing import flagsaver
    cost_fidelity, flags_ = fidelity, fidelity.FLAGS
    run = dict(small=True, variants=5, rounds=7, rounds_within=2.5, options="defaults",
               variants_apart=False, variant_processes=4, agree=0.5)
    own = {f.name for f in flags_.get_flags_for_module(cost_fidelity)}
    assert own - cost_fidelity.NOT_PASSED == set(run) - {"small"}
    with flagsaver.flagsaver(models=["sru", "bert"], cases=True, readme=True, **run):
        command = cost_fidelity.child_command("bert", "/c", "/o")
        flags_.unparse_flags()                      # the child starts from defaults
        flags_(command[1:])
        child = {f: flags_[f].value for f in [*run, "models", "cases", "readme",
                                               "apart", "cache_dir", "out"]}
    assert child == {**run, "models": ["bert"], "cases": False, "readme": False,
                     "apart": False, "cache_dir": "/c", "out": "/o"}


@pytest.mark.slow        # 125-189 s on 2 cores, an example script end to end as the others
def test_cost_fidelity_runs_each_model_in_a_process_of_its_own(tmp_path):
    """The script end to end, each model priced and timed apart (`--apart`, the default):
    the run's record holds both models, with the variants `variants.py` makes for each,
    timed in the two sets of processes asked for (not the default three), no more under
    `--agree=0` (more sets where halves disagree:
    `test_more_sets_are_timed_where_the_first_sets_halves_disagree`), and the pages each
    faulted a call."""
    result = _run("examples/cost_fidelity.py", "--small", "--models=sru,bert",
                  "--variants=3", "--rounds=2", "--rounds_within=1", "--nocases",
                  "--variant_processes=2", "--agree=0",
                  f"--cache_dir={tmp_path / 'cache'}", f"--out={tmp_path / 'out'}")
    assert result.returncode == 0, result.stderr[-2000:]
    records = json.loads((tmp_path / "out" / "cost_fidelity.json").read_text())["models"]
    assert [r["model"] for r in records] == ["sru", "bert"]
    import cost_fidelity
    import variants
    for r in records:
        graph, _, frozen_inputs = cost_fidelity.captured(r["model"], True)
        names = [n for n, _ in variants.variants(graph, 3, fixed=frozen_inputs)]
        assert [v["name"] for v in r["variants"]] == names
        assert all(v["measured_s"] > 0 and v["predicted_s"] > 0 for v in r["variants"])
        # the record reads its kinds off its own variants (`kinds_exact`)
        assert r["kinds_exact"] == pytest.approx(fidelity_stats.kinds_exact(
            names, [v["measured_s"] for v in r["variants"]]), nan_ok=True)
        # the model's process was given the run's flags: two sets of variant
        # processes, a round or more from each
        sets = r["processes_per_variant"]
        assert sets == 2
        assert all(len(v["speedup_by_round"]) >= sets for v in r["variants"])
        assert all(v["faults_per_call"] is None or v["faults_per_call"] >= 0
                   for v in r["variants"])


def test_a_variant_runs_in_a_process_of_its_own_and_must_be_the_one_asked_for():
    """`worker.Worker`: the variant rebuilt in a spawned process answers turns (a call's
    least seconds) and its faults a call; a digest the process does not draw is refused
    with the model's name, and the process is gone after the `with`."""
    import variants
    import worker
    graph, _, frozen_inputs = worker.captured("sru", True)
    found = variants.variants(graph, 3, fixed=frozen_inputs)
    with worker.Worker("sru", True, 3, 2, found[2][1].digest) as w:
        w.ready()
        assert 0 < w.turn(0.05) < 1.0
        faults = w.faults()
        assert faults is None or faults >= 0
        process = w._process
    assert not process.is_alive()
    with worker.Worker("sru", True, 3, 1, found[2][1].digest) as w:
        with pytest.raises(RuntimeError, match=r"(?s)sru variant 1 .*drawn otherwise"):
            w.ready()


def test_a_measurement_whose_halves_disagree_gets_the_sets_spearman_brown_asks():
    # Halves at 0.77 after 3 sets: reaching 0.9 takes 0.9 * 0.23 / (0.77 * 0.1) = 2.69
    # times the rounds, 9 sets; at 0.86, 1.47 times, 5 sets; already at 0.9, no more;
    # capped at `most`, and `most` where the halves do not agree at all.
    assert fidelity_stats.sets_to_agree(0.77, 3, 0.9, 9) == 9
    assert fidelity_stats.sets_to_agree(0.86, 3, 0.9, 9) == 5
    assert fidelity_stats.sets_to_agree(0.9, 3, 0.9, 9) == 3
    assert fidelity_stats.sets_to_agree(0.5, 3, 0.9, 9) == 9
    assert fidelity_stats.sets_to_agree(-0.1, 3, 0.9, 9) == 9
    assert fidelity_stats.sets_to_agree(float("nan"), 3, 0.9, 9) == 9
    # --agree=0 turns it off
    assert fidelity_stats.sets_to_agree(0.2, 3, 0.0, 9) == 3


def test_more_sets_are_timed_where_the_first_sets_halves_disagree(monkeypatch, fidelity):
    """`apart_round_robin` takes `sets_to_agree`'s count once, after the first sets:
    halves at 0.5 after one set ask 9 times the rounds, capped at three times the sets.
    (6a953f5 reused the first sets' name for the loop over workers, the count was never
    taken, and a full run timed BERT in three sets at halves 0.85.)"""
    from absl.testing import flagsaver
    import variants
    cost_fidelity = fidelity
    asked, built = [], []
    monkeypatch.setattr(cost_fidelity, "split_half", lambda r: asked.append(r) or 0.5)

    class Tagged(cost_fidelity.Worker):
        """The real worker, its turns told apart: variant i's a whole i hours longer."""
        def __init__(self, name, small, count, index, *rest):
            super().__init__(name, small, count, index, *rest)
            self.index = index
            built.append(index)

        def turn(self, seconds):
            return super().turn(seconds) + 3600 * self.index

    monkeypatch.setattr(cost_fidelity, "Worker", Tagged)
    with flagsaver.flagsaver(small=True, variants=2, variant_processes=1, rounds=1,
                             rounds_within=1.0, agree=0.9):
        graph, _, fixed = cost_fidelity.captured("sru", True)
        found = variants.variants(graph, 2, fixed=fixed)
        measured, ratios, _, sets = cost_fidelity.apart_round_robin("sru", found, {})
    assert sets == 3 and len(asked) == 1
    assert len(measured) == len(found) and all(len(r) >= 3 for r in ratios)
    # each set built in its own order (`build_order`), every turn still its variant's
    assert built == [0, 1, 1, 0, 1, 0]
    assert [round(m / 3600) for m in measured] == [0, 1]


def test_each_set_of_processes_builds_the_variants_in_an_order_of_its_own():
    import cost_fidelity
    orders = [cost_fidelity.build_order(24, k) for k in range(4)]
    assert orders[0] == list(range(24))
    assert all(sorted(o) == list(range(24)) for o in orders)
    assert len({tuple(o) for o in orders}) == 4
    assert cost_fidelity.build_order(24, 2) == orders[2]      # a rerun builds alike


def test_sets_of_processes_that_order_the_variants_apart_are_read_as_disagreeing():
    """`across_sets` sees a process's own speed, which `split_half` cannot: here each
    set's rounds agree exactly, but the sets order the four variants apart."""
    def one_set(times):         # each variant's time, alike in all four rounds
        return {i: [t] * 4 for i, t in enumerate(times)}

    alike = [one_set([1.0, 1.1, 1.2, 1.3])] * 3
    apart = [one_set([1.0, 1.1, 1.2, 1.3]), one_set([1.0, 1.3, 1.2, 1.1]),
             one_set([1.0, 1.2, 1.3, 1.1])]
    assert fidelity_stats.across_sets(alike) == pytest.approx(1.0)
    assert fidelity_stats.across_sets(apart) < 0.7      # pairs at 0.2, 0.4, 0.8: 0.57
    assert fidelity_stats.sets_to_agree(fidelity_stats.across_sets(apart), 3, 0.9, 9) > 3
    pooled = {i: sum((s[i] for s in apart), []) for i in range(4)}
    halves = fidelity_stats.split_half(fidelity_stats.ratios_of(
        bench.summary(pooled)))
    assert halves == pytest.approx(1.0)      # the rounds' halves see nothing amiss
    assert math.isnan(fidelity_stats.across_sets(alike[:1]))


def test_a_fidelity_run_keeps_each_model_done_when_a_later_one_fails(tmp_path, fidelity):
    """`run` writes the models done so far after each one (`keep`): a run that stops
    partway keeps them in the report's shape; one that ends leaves only the report."""
    from absl.testing import flagsaver
    cost_fidelity = fidelity
    out, partial = tmp_path / "out", tmp_path / "out" / cost_fidelity.PARTIAL
    quick = dict(small=True, variants=2, apart=False, variants_apart=False, rounds=2,
                 rounds_within=0.0, cases=False, readme=False, out=str(out))
    with flagsaver.flagsaver(models=["sru", "no_such_model"], **quick):
        with pytest.raises(ValueError, match="no_such_model"):
            cost_fidelity.run(str(tmp_path / "cache"))
    kept = json.loads(partial.read_text())
    assert [m["model"] for m in kept["models"]] == ["sru"]
    assert len(kept["models"][0]["variants"]) == 2 and kept["sign_cases"] == []
    assert not (out / "cost_fidelity.json").exists()
    with flagsaver.flagsaver(models=["sru"], **quick):
        cost_fidelity.run(str(tmp_path / "cache"))
    assert not partial.exists()
    report = json.loads((out / "cost_fidelity.json").read_text())
    assert [m["model"] for m in report["models"]] == ["sru"]


def test_a_script_refuses_the_bench_flags_it_does_not_read(fidelity):
    """`bench.refuse_unused`: every script imports bench's flags; one that would ignore
    `--dtype=bfloat16` and time float32 stops and names the flag instead."""
    from absl import app as absl_app
    flags_ = fidelity.FLAGS
    flags_.unparse_flags()
    flags_(["cost_fidelity", "--small", "--dtype=bfloat16", "--seed=3"])
    with pytest.raises(absl_app.UsageError, match="--dtype, --seed") as refused:
        bench.refuse_unused("small")
    assert "--small" not in str(refused.value).split("(")[0]
    bench.refuse_unused("small", "dtype", "seed")        # the flags it reads pass


def test_cost_fidelity_stops_on_a_layout_it_would_not_time():
    result = _run("examples/cost_fidelity.py", "--layout=NHWC", "--models=sru",
                  "--nocases", "--out=/nonexistent", timeout=120)
    assert result.returncode != 0 and "does not take --layout" in result.stderr
    assert not os.path.exists("/nonexistent")
