"""Does the cost model tell XLA's truth? Predicted vs measured time of equivalent programs.

    python examples/cost_fidelity.py                 # every zoo model, 24 variants each
    python examples/cost_fidelity.py --readme        # also rewrite the README's table
    python examples/cost_fidelity.py --small --models=bert,sru --variants=8   # a smoke run
    python examples/cost_fidelity.py --cache_dir=C --out=R    # keep the kernel timings, then
    python examples/cost_fidelity.py --cache_dir=C --rescore=R/cost_fidelity.json --nocases
    python examples/cost_fidelity.py --pooled=R1/cost_fidelity.json,R2/cost_fidelity.json

Each model's programs are compiled with the XLA options `hlo_opt.jit` would choose for it
on this device (`compile_options`; `--options=defaults` for XLA's own), and its kernels
are priced compiled the same way. For each model: variants from `variants.py` (layouts,
merged dots, split grouped convs, and the search's own conv and sequence moves by the
verified rules), each priced by the
measured cost model with the weights frozen, and each timed as a whole program
(weight-only work precomputed, as `frozen_argnums` will do), round-robin over the
variants so drift hits all alike. Reported: Spearman rank correlation of predicted vs
measured, and of the measurement with itself (even rounds against odd, `split_half`),
with the Spearman a perfect model would expect against a measurement that agrees with
itself so far (`ceiling`), and of the model's prices with a second pricing from an
empty cache (`reprice`); the Spearman a model exact on each kind of variant, and blind
within a kind, would read (`kinds_exact`);
the pairs of variants whose order the rounds decide (a sign test) and how many of
those the model orders right; and how far the predicted speed-up over the
original is from the measured one. Then the sign cases of the cost-model issue: each a
pair of programs whose speed-up was measured as a win or a loss; the model must call
the sign this device measures, where a sign test over the rounds decides one.
Also: how long pricing a model's kernels takes from a cold and from a warm cache.
Each model is priced in a Python process of its own (`--noapart`: all in this one), and
each of its variants is timed in a process of its own, the turns interleaved across them
(`worker.py`; `--novariants_apart`: all in the model's process), as a user's program
runs; each variant's record says how many pages a call of it faulted. Where the rounds'
halves, or its sets of processes, agree under `--agree` (BERT's, whose variants nearly
tie), more sets of processes are timed, as many as that agreement says it takes
(`sets_to_agree`).

`--rescore` prices a kept run's variants again with the code as it is now, from that
run's kernel timings (`--cache_dir`), and scores the prices against the run's own
measurements: a change to the pricing read against one measurement in minutes, where a
run takes most of an hour, and without the kernel timings' drift between two runs
(repriced from a cache another run had partly filled, one run's Inception-v3 variants
moved up to 31% and its Spearman from 0.75 to 0.69). A score to try a change by, not a result:
a change is shown by a run of its own.

`--pooled` scores the last of several kept runs' prices against the measurements of all
of them pooled (`docs/runs` keeps the last full runs): a reading of how far one run's measurement,
not the model, set its Spearman.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from jax import lax

import bench
import models
import variants as V
from fidelity_stats import (across_sets, ceiling, kinds_exact, pooled, ratios_of, scores,
                            sets_to_agree, spearman, split_half)
from hlo_opt import capture, compile_options, cost, pipeline
from hlo_opt.cost.cache import write_json
from models import layers
from worker import Worker, captured, faults_per_call, program

CASE_ROUNDS = 15      # rounds per sign case at least: 12 of 15 on one side decide it (p 0.035)
CASE_WITHIN = 15.0    # seconds of a sign case's rounds, more rounds while they fit
TURN = 0.1            # seconds a program runs at its turn, its least call the sample (`bench.least_call`)
MORE = 15             # rounds at most, times those asked, while they fit in the time given

flags.DEFINE_list("models", list(models.NAMES), "Models to run.")
flags.DEFINE_integer("variants", 24, "Variants per model (the original included).")
flags.DEFINE_integer("rounds", 9, "Round-robin timing rounds at least (a sign test needs 6 "
                     "or more).")
flags.DEFINE_float("rounds_within", 180.0, f"More rounds, up to {MORE} times --rounds, while a "
                   "model's rounds take at most this many seconds (`round_robin`).")
flags.DEFINE_bool("cases", True, "Also run the sign cases.")
flags.DEFINE_string("out", "results", "Directory for cost_fidelity.json and .md; while a "
                    "run goes, cost_fidelity.partial.json holds the models done so far.")
flags.DEFINE_bool("readme", False, "Rewrite the README's cost_fidelity section.")
FIXED = {"defaults": {}, "ynn_eltwise": compile_options.YNN_ELTWISE}
flags.DEFINE_enum("options", "choose", ["choose", *FIXED], "XLA compile options of each "
                  "model's programs: chosen by timing as hlo_opt.jit does "
                  "(`pipeline.choose_options`), XLA's defaults, or YNNPACK's elementwise "
                  "fusions only. The sign cases always use the defaults.")
flags.DEFINE_string("cache_dir", None, "Kernel timings to start from (default: none, a "
                    "fresh directory: the run's own timings, not entries older runs wrote "
                    "under other loads).")
flags.DEFINE_string("rescore", None, "A cost_fidelity.json of a run made with --cache_dir: "
                    "price its variants again from that directory and score them against "
                    "its measurements; nothing is run (see the module's doc).")
flags.DEFINE_list("pooled", None, "Kept runs' cost_fidelity.json files, the one scored last: "
                  "its prices against the measurements of all those compiled as it was, "
                  "pooled (`pooled`); nothing is run.")
flags.DEFINE_bool("apart", True, "Each model priced and timed in a Python process of its "
                  "own (`apart`), as a user's program runs: in one process after other "
                  "models, Inception-v3's im2col variants ran as if their temp buffer's "
                  "pages were not faulted in (two full runs), where a fresh process "
                  "faulted them every call.")
flags.DEFINE_bool("variants_apart", True, "Each variant built and timed in a process of "
                  "its own, the turns interleaved across them (`worker.py`): among the 24 "
                  "in one process, an im2col variant's temp buffer was not faulted in, "
                  "where alone, as a user runs it, it was every call.")
flags.DEFINE_integer("variant_processes", 3, "With --variants_apart, each variant is built "
                     "in this many processes, one after another, the rounds shared among "
                     "them: a process's own speed holds for its life, and 24 processes of "
                     "SRU's one program ran 2.56-3.13 ms, each within a few percent over "
                     "its rounds.")
flags.DEFINE_float("agree", 0.9, "With --variants_apart, where the measurement's halves "
                   "(`split_half`) or its sets of processes (`across_sets`) agree under "
                   "this after --variant_processes sets, more sets, up to three times as "
                   "many, as many as Spearman-Brown says reach it (`sets_to_agree`); 0 "
                   "for none.")
FLAGS = flags.FLAGS


def round_robin(programs, rounds: int, within: float = 0.0
                ) -> tuple[list[float], list[list[float]]]:
    """Median seconds per call of each (fn, args), timed interleaved as the benchmarks
    do, and each one's per-round speed-up over the first. A sample is the least call of
    a turn of `TURN` seconds, every call timed, the first left out (`bench.least_call`:
    the cost model prices a program run again and again, as a user runs it, not one
    that 23 others ran before, and reads its kernels' least samples, as interference
    only slows a call). Against the mean of the calls after 0.25 s of untimed ones, as
    the rounds were timed until 2026-12-02, the even rounds ranked the variants against
    the odd at 0.86 (0.39) on SqueezeNet, 0.92 (0.76) on NasRNN, 0.98 (0.87) on SRU,
    0.92 (0.94) on ResNeXt-50 (136 ms a call: three calls a turn) and 0.51 (0.55) on
    BERT, whose variants tie; and two fresh pricings ranked SqueezeNet's at 0.92 and
    0.93 (0.45, 0.41): the kernels are priced by their least samples, and the measurement
    now reads the same thing (16 rounds each, AMD host, `docs/history.md`).

    Turns of 0.1 s, not 0.5 as until 2026-12-06: the host's speed moves in spells of a
    second or so (one process calling NasRNN's program, the least call of each 0.25 s
    read 4.2-7.3 ms, each such reading correlated 0.71 with the next, 0.28 with the
    fifth, 0.08 with the tenth; AMD host), so a variant's median needs turns spread over
    many spells. The same 24 worker processes of NasRNN timed in three blocks of 5
    rounds of 0.5 s turns and three of 25 rounds of 0.1 s turns, alternating, each block
    a minute: each block's medians ranked the variants against another block's at
    0.40-0.91 (mean 0.57) with the long turns and 0.83-0.93 (0.89) with the short; SRU's
    0.24-0.79 (0.45) and 0.86-0.98 (0.90) (`docs/history.md`).

    At least `rounds`, then more, up to `MORE` times as many, while they fit in `within`
    seconds: a round of SqueezeNet's 24 variants took 12 s in 0.5 s turns, one of
    NASNet-A's 53 (two calls a turn, however short the turn). Eight
    fresh pricings of SqueezeNet's variants ranked them against a full run's 9 rounds
    at 0.81-0.91 (median 0.84), and against the 27 rounds of a run of its own at
    0.86-0.95 (0.94): there the measurement, not the model, held the Spearman down
    (one run of each; `docs/history.md`)."""
    timing = bench.interleaved({i: functools.partial(fn, *args)
                                for i, (fn, args) in enumerate(programs)}, (), rounds,
                               settle=TURN, least=True, within=within, most=MORE * rounds)
    return [timing["ms"][i] / 1e3 for i in range(len(programs))], ratios_of(timing)


def build_order(count: int, set_index: int) -> list[int]:
    """The order set `set_index` of processes builds `count` variants in: the first set
    in the variants' order, each later one in a shuffle of its own (seeded by its
    index, so a rerun builds alike). In the full run at 6a03ef3, ResNet-50's variants
    read slower the later their processes were built in two of its three sets (against
    the six earlier Intel runs pooled, variants 14-23 read 8-22% slower, and the rank
    of a variant's gap against its build position was -0.89 in one set), where a
    ResNet-50-only run after it read no such drift (0.97): built in one order every
    set, a drift with build position ranks the variants by their index; in orders of
    their own it is noise that the median over the sets takes out."""
    order = list(range(count))
    if set_index:
        random.Random(set_index).shuffle(order)
    return order


def apart_round_robin(name: str, found, options) -> tuple[list, list, list, int]:
    """`round_robin` with each variant in a process of its own (`worker.Worker`), and
    the pages a call of each faulted after the rounds (in the last set of processes,
    below), and the sets of processes timed. Built two at a time (the cores here), each
    pair once the last is ready, each set in its `build_order`: BERT's 24, built, held
    19.8 GB of the Intel host's 24 GiB (0.8 GB each, its 384 MiB of weights and jax's
    own), and more compiling at once would add their compiles' memory to that.

    A process is fast or slow for its life: 24 processes of SRU's original, built in
    turn and timed in rounds, ran at medians of 2.56-3.13 ms, none of them moving more
    than 7% over its rounds (Kruskal-Wallis p < 1e-4; `docs/history.md`), and SRU's
    original read 2.96 ms in one run and 3.16 in the next while other variants read the
    same. So the rounds are shared among `--variant_processes` sets of processes, one
    set after another, each variant's time the median over all of them; then, where the
    rounds' halves or its sets (`across_sets`, the lesser) agree under `--agree`, more
    sets as `sets_to_agree` says, each like the first."""
    first = sets = max(1, FLAGS.variant_processes)
    each = max(1, math.ceil(FLAGS.rounds / sets))
    samples: dict[int, list[float]] = {i: [] for i in range(len(found))}
    per_set, done = [], 0
    while done < sets:
        with contextlib.ExitStack() as stack:
            workers = {}
            order = build_order(len(found), done)
            for pair in range(0, len(found), 2):
                started = {i: stack.enter_context(Worker(name, FLAGS.small, FLAGS.variants,
                                                         i, found[i][1].digest, options))
                           for i in order[pair:pair + 2]}
                workers |= {i: w.ready() for i, w in started.items()}
            got = bench.rounds(lambda i: workers[i].turn(TURN), list(range(len(workers))),
                               each, within=FLAGS.rounds_within / sets, most=MORE * each)
            for i, s in got.items():
                samples[i] += s
            per_set.append(got)
            faults = [workers[i].faults() for i in range(len(found))]
        done += 1
        if done == first:
            halves = split_half(ratios_of(bench.summary(samples)))
            apart = across_sets(per_set)
            split = apart if apart < halves else halves     # NaN where one set: the halves
            sets = sets_to_agree(split, done, FLAGS.agree, 3 * done)
            if sets > done:
                logging.warning("%s: the rounds' halves agree at %.2f, the sets of "
                                "processes at %.2f; %d sets in all", name, halves, apart,
                                sets)
    timing = bench.summary(samples)
    return ([timing["ms"][i] / 1e3 for i in range(len(found))], ratios_of(timing), faults,
            sets)


def cache_timing(graph, frozen_inputs, options) -> tuple[float, float, int]:
    """Seconds to price `graph` from an empty cache, then warm; kernels measured."""
    with tempfile.TemporaryDirectory() as tmp:
        cold = cost.Measured(tmp, compiler_options=options)
        start = time.perf_counter()
        cold.cost(graph, frozen_inputs)
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        cost.Measured(tmp, compiler_options=options).cost(graph, frozen_inputs)
        return cold_s, time.perf_counter() - start, cold.measured


def reprice(graphs, frozen_inputs, options) -> list[float]:
    """Each graph's price by a second model from an empty cache: its kernels timed again,
    in other batches at other moments. How far the two pricings' orders part is the
    model's own noise, as `split_half` is the measurement's."""
    with tempfile.TemporaryDirectory() as tmp:
        again = cost.Measured(tmp, compiler_options=options)
        return [again.cost(g, frozen_inputs).total for g in graphs]


def fidelity(name: str, cache_dir: str) -> dict:
    """The model's variants priced and run compiled with the options `hlo_opt.jit`
    would choose for its original (`--options`)."""
    graph, args, frozen_inputs = captured(name, FLAGS.small)
    options = pipeline.choose_options(graph, frozen_inputs, args) \
        if FLAGS.options == "choose" else FIXED[FLAGS.options]
    model = cost.Measured(cache_dir, compiler_options=options)
    cold_s, warm_s, kernels = cache_timing(graph, frozen_inputs, options)
    found = V.variants(graph, FLAGS.variants, fixed=frozen_inputs)
    predicted = [model.cost(g, frozen_inputs).total for _, g in found]
    repriced = reprice([g for _, g in found], frozen_inputs, options)
    if FLAGS.variants_apart:
        measured, ratios, faults, sets = apart_round_robin(name, found, options)
    else:
        sets = 0
        programs = [program(g, frozen_inputs, args, options) for _, g in found]
        measured, ratios = round_robin(programs, FLAGS.rounds, FLAGS.rounds_within)
        faults = [faults_per_call(fn, a) for fn, a in programs]
    agreement = split_half(ratios)
    return {"model": name, "compiler_options": compile_options.label(options),
            "small": FLAGS.small,
            "processes_per_variant": sets,
            # each round's speed-up over the original too: a run that reads off can be
            # told from a slow spell (rounds apart) or a steady bias (every round)
            "variants": [{"name": n, "predicted_s": p, "repriced_s": q, "measured_s": m,
                          "speedup_by_round": r, "faults_per_call": f}
                         for (n, _), p, q, m, r, f in zip(found, predicted, repriced,
                                                          measured, ratios, faults)],
            **scores(predicted, measured, ratios),
            "split_half": agreement,
            "priced_vs_itself": spearman(predicted, repriced),
            "ceiling": ceiling(agreement),
            "kinds_exact": kinds_exact([n for n, _ in found], measured),
            "cold_s": cold_s, "warm_s": warm_s, "kernels_measured_cold": kernels}


def rescore(record: dict, cache_dir: str) -> dict:
    """`record` (one model of a kept run) priced again by this code from `cache_dir`,
    scored against its measurements. Its variants are made again from the same seed;
    a run whose variants this code makes otherwise (other names, another size) is
    refused, not scored."""
    small = record.get("small", False)
    graph, _, frozen_inputs = captured(record["model"], small)
    found = V.variants(graph, len(record["variants"]), fixed=frozen_inputs)
    stored = [v["name"] for v in record["variants"]]
    if [n for n, _ in found] != stored:
        raise ValueError(f"{record['model']} (small={small}): this code makes the variants "
                         f"{[n for n, _ in found]}, the run had {stored}")
    model = cost.Measured(cache_dir, compiler_options=compile_options.parse(
        record.get("compiler_options", "")))
    predicted = [model.cost(g, frozen_inputs).total for _, g in found]
    measured = [v["measured_s"] for v in record["variants"]]
    return {"model": record["model"], "predicted_s": predicted,
            **scores(predicted, measured, [v["speedup_by_round"] for v in record["variants"]]),
            "run_spearman": record["spearman"],
            "run_speedup_error_median": record["speedup_error_median"],
            "timed": model.measured + model.programs}     # kernels, programs not in the cache


# -- the sign cases -------------------------------------------------------------------------

def _rand(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _conv(layout, groups=1):
    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=groups,
                                        dimension_numbers=(layout, layers.KERNEL_LAYOUT[layout],
                                                           layout))
    return f


# Each case: (original, its arguments), (variant, its arguments), frozen argument indices.

def _resnet_layouts():
    fn, params, (x,) = models.build("resnet50", small=FLAGS.small)
    fn_nhwc, _, _ = models.build("resnet50", layout="NHWC", small=FLAGS.small)

    def nhwc(params, x):
        p, (img,) = layers.to_layout(params, (x,), "NCHW", "NHWC")
        return fn_nhwc(p, img)
    args = (params, x)
    return (fn, args), (nhwc, args), range(len(jax.tree.leaves(params)))


def _one_by_one():
    """The conv alone, its activations in either layout (as inside a network whose
    layout changed as a whole; the edge transposes are the case above)."""
    x, w = _rand(1, 256, 56, 56), _rand(64, 256, 1, 1)
    return ((_conv("NCHW"), (x, w)),
            (_conv("NHWC"), (x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0))), (1,))


def _grouped(split: bool):
    x, w = _rand(1, 128, 56, 56), _rand(128, 4, 3, 3)
    grouped = _conv("NCHW", groups=32)

    def as_split(x, w):
        return jnp.concatenate([_conv("NCHW")(x[:, 4 * g:4 * g + 4], w[4 * g:4 * g + 4])
                                for g in range(32)], axis=1)

    def block_diagonal(x, w):
        w5 = w.reshape(32, 4, 4, 3, 3)                         # (G, O/G, I/G, kh, kw)
        dense = jnp.einsum("goikl,gh->gohikl", w5, jnp.eye(32)).reshape(128, 128, 3, 3)
        y = _conv("NHWC")(x.transpose(0, 2, 3, 1), dense.transpose(2, 3, 1, 0))
        return y.transpose(0, 3, 1, 2)
    return (grouped, (x, w)), (as_split if split else block_diagonal, (x, w)), (1,)


def _qkv(frozen_weights: bool):
    args = (_rand(64, 1024), *(_rand(1024, 1024, seed=i) for i in (1, 2, 3)))

    def separate(x, a, b, c):
        return x @ a, x @ b, x @ c

    def merged(x, a, b, c):
        y = x @ jnp.concatenate([a, b, c], axis=1)
        return y[:, :1024], y[:, 1024:2048], y[:, 2048:]
    # Weights are arguments 1..3; frozen means the concat is computed once.
    return (separate, args), (merged, args), (1, 2, 3) if frozen_weights else ()


def _enlarge_and_merge(channels: int, size: int):
    """A 1x1 and a 3x3 conv reading one input, or the 1x1 kernel padded to 3x3 and both
    as one conv of twice the outputs (TASO's enlarge-then-merge). At 64 channels on
    56x56 the two take the same time on the 2-core CPUs met so far (per-round ratios on
    both sides of 1); at 128 on 28x28 the merged conv's extra work shows."""
    c = channels
    args = (_rand(1, c, size, size), _rand(c, c, 1, 1), _rand(c, c, 3, 3, seed=1))
    conv = _conv("NCHW")

    def separate(x, w1, w3):
        return conv(x, w1), conv(x, w3)

    def merged(x, w1, w3):
        wide = jnp.concatenate([jnp.pad(w1, ((0, 0), (0, 0), (1, 1), (1, 1))), w3], axis=0)
        y = conv(x, wide)
        return y[:, :c], y[:, c:]
    return (separate, args), (merged, args), (1, 2)


def _nasrnn(transform):
    """NasRNN with every dot pair merged (`x@W + h@U -> concat(x,h) @ concat(W;U)`, TASO's
    move), or every group of dots sharing an operand merged."""
    fn, params, inputs = models.build("nasrnn", small=FLAGS.small)
    args = (params, *inputs)
    graph = capture.capture(fn, args).graph
    variant = graph
    while (todo := transform[0](variant)):
        variant = transform[1](variant, todo[0])
    return graph, variant, args, range(len(jax.tree.leaves(params)))


def sign_cases(model: cost.CostModel) -> list[dict]:
    cases = [
        ("ResNet-50 NCHW -> NHWC", "2.25-2.45x", *_resnet_layouts()),
        ("1x1 conv NCHW -> NHWC", "3.6x", *_one_by_one()),
        ("ResNeXt 32-group conv -> 32 convs", "2.68x", *_grouped(split=True)),
        ("ResNeXt 32-group conv -> block-diagonal NHWC", "3.0x", *_grouped(split=False)),
        ("merge 3 matmuls, weights frozen", "1.09x", *_qkv(True)),
        ("merge 3 matmuls, concat per call", "0.73x", *_qkv(False)),
        ("enlarge 1x1 to 3x3 and merge, 64 ch 56x56", "0.85x", *_enlarge_and_merge(64, 56)),
        ("enlarge 1x1 to 3x3 and merge, 128 ch 28x28", "0.85x", *_enlarge_and_merge(128, 28)),
    ]
    records = []
    for label, paper, (base, base_args), (variant, variant_args), frozen_inputs in cases:
        graphs = [capture.capture(f, tuple(a)).graph
                  for f, a in ((base, base_args), (variant, variant_args))]
        leaves = [jax.tree.leaves(base_args), jax.tree.leaves(variant_args)]
        records.append(_case(label, paper, graphs, frozen_inputs, leaves, model))
    for label, paper, transform in [
            ("NasRNN: merge the 8 matmul pairs", "0.87-0.96x", (V.dot_pairs, V.merge_pair)),
            ("NasRNN: merge dots sharing x or h (extra)", "-", (V.dot_groups, V.merge_dots))]:
        graph, variant, args, frozen_inputs = _nasrnn(transform)
        leaves = jax.tree.leaves(args)
        records.append(_case(label, paper, [graph, variant], frozen_inputs, [leaves] * 2,
                             model))
    return records


def _case(label, paper, graphs, frozen_inputs, leaves, model) -> dict:
    """Predicted and measured speed-up of graphs[1] over graphs[0]; leaves[i] are the
    arguments of graphs[i]."""
    predicted = [model.cost(g, frozen_inputs).total for g in graphs]
    timing = bench.interleaved({i: functools.partial(fn, *a) for i, (fn, a) in enumerate(
        program(g, frozen_inputs, x) for g, x in zip(graphs, leaves))}, (),
        max(FLAGS.rounds, CASE_ROUNDS), settle=TURN, least=True, within=CASE_WITHIN,
        most=MORE * max(FLAGS.rounds, CASE_ROUNDS))
    pred = predicted[0] / predicted[1]
    ratio = timing["speedup"][1]             # per-round ratios, median and spread
    sign = bench.sign_of(ratio["ratios"])
    return {"case": label, "reported": paper, "predicted_speedup": pred,
            "measured_speedup": ratio["median"], "measured_range": [ratio["min"], ratio["max"]],
            "measured_sign": sign,
            "sign_right": None if sign == 0 else (pred > 1) == (sign > 0)}


# -- report ---------------------------------------------------------------------------------

def markdown(records, cases, env) -> str:
    lines = [f"Measured on **{env['device_kind']}** ({env['platform']}; host CPU "
             f"{env['cpu_model'] or 'unknown'}, {env['cpu_count']} cores), jax {env['jax']}, "
             f"{env['date']}, by `{bench.command_line()}`.", "",
             "| model | compiled with | variants | rounds | Spearman | measured vs itself "
             "| a perfect model's (est.) | a model exact on each kind "
             "| priced vs itself | pairs decided | of those, "
             "ordered right | speed-up error median / max | within 15% "
             "| price kernels cold / warm (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- |"]
    for r in records:
        ordered = f"{r['decided_pairs_right'] / r['decided_pairs']:.0%}" \
            if r["decided_pairs"] else "-"
        compiled = compile_options.describe(compile_options.parse(r.get("compiler_options", "")))
        rounds = len(r["variants"][0].get("speedup_by_round", [])) or "-"
        lines.append(f"| {r['model']} | {compiled} | {len(r['variants'])} | {rounds} | "
                     f"{r['spearman']:.2f} | "
                     f"{r.get('split_half', float('nan')):.2f} | "
                     f"{r.get('ceiling', float('nan')):.2f} | "
                     f"{r.get('kinds_exact', float('nan')):.2f} | "
                     f"{r.get('priced_vs_itself', float('nan')):.2f} | "
                     f"{r['decided_pairs']} of {r['pairs']} | {ordered} | "
                     f"{r['speedup_error_median']:.0%} / {r['speedup_error_max']:.0%} | "
                     f"{r['within_15pct']:.0%} | {r['cold_s']:.1f} / {r['warm_s']:.2f} |")
    if cases:
        lines += ["", "| sign case | reported | predicted | measured (range over rounds) "
                  f"| sign right (sign test over {CASE_ROUNDS}+ rounds) |", "| --- | --- | --- | --- | --- |"]
        for c in cases:
            lo, hi = c["measured_range"]
            right = {True: "yes", False: "NO", None: "no sign: a tie on this device"}
            lines.append(f"| {c['case']} | {c['reported']} | {c['predicted_speedup']:.2f}x | "
                         f"{c['measured_speedup']:.2f}x ({lo:.2f}-{hi:.2f}) | "
                         f"{right[c['sign_right']]} |")
    return "\n".join(lines) + "\n"


# This module's flags a model's process does not take from the run: `apart` sets them
# itself, or they say what the run does, not how a model is measured. Every other flag
# of the module is handed on, so a new measurement flag cannot be left behind, as
# `--agree` was until 1c02104; a new mode flag left off this set fails the model's
# process loudly.
NOT_PASSED = {"models", "cases", "out", "readme", "cache_dir", "rescore", "pooled", "apart"}


def child_command(name: str, cache_dir: str, out: str) -> list[str]:
    """The command line of `apart`'s process for model `name`: this run's measurement
    flags, and `--small` (the model's configuration, a flag of `bench`)."""
    own = [f.name for f in FLAGS.get_flags_for_module(sys.modules[__name__])]
    passed = sorted({*own, "small"} - NOT_PASSED)
    return [sys.executable, str(Path(__file__).resolve()), f"--models={name}",
            "--nocases", "--noapart", f"--cache_dir={cache_dir}", f"--out={out}",
            *(f"--{f}={FLAGS[f].value}" for f in passed)]


def apart(name: str, cache_dir: str) -> dict:
    """`fidelity(name)` run in a fresh Python process with this run's flags: what a
    process holds after other models (malloc's free chunks, among others) is not what a
    user's program starts with. Its record, read from the JSON it writes."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(child_command(name, cache_dir, out), check=True)
        return json.loads((Path(out) / "cost_fidelity.json").read_text())["models"][0]


PARTIAL = "cost_fidelity.partial.json"


def report(records: list[dict], cases: list[dict]) -> dict:
    """The JSON a run writes (`--rescore` and `--pooled` read its models)."""
    return {"environment": bench.environment(), "models": records, "sign_cases": cases}


def keep(records: list[dict], out: str) -> None:
    """The models done so far, as `--out`/`PARTIAL` in the report's own shape: a run
    stopped after five of eight models, as one at eabf93e was, kept only its log.
    Written to a temp file and renamed, so never torn."""
    os.makedirs(out, exist_ok=True)
    write_json(Path(out) / PARTIAL, report(records, []), indent=1)


def run(cache_dir: str) -> None:
    records = []
    for name in FLAGS.models:
        logging.warning("cost fidelity: %s", name)
        records.append(apart(name, cache_dir) if FLAGS.apart else fidelity(name, cache_dir))
        keep(records, FLAGS.out)
        r = records[-1]
        print(f"{name}: {len(r['variants'])} variants, Spearman {r['spearman']:.2f} "
              f"(measured vs itself {r['split_half']:.2f}), "
              f"speed-up error median {r['speedup_error_median']:.0%}", flush=True)
    cases = sign_cases(cost.Measured(cache_dir)) if FLAGS.cases else []
    payload = report(records, cases)
    bench.write_report("cost_fidelity", payload, markdown(records, cases,
                                                          payload["environment"]),
                       FLAGS.out, FLAGS.readme)
    (Path(FLAGS.out) / PARTIAL).unlink(missing_ok=True)


def main(argv):
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    bench.refuse_unused("small")
    bench.quiet_logs()
    if FLAGS.pooled:
        runs = [json.loads(Path(p).read_text())["models"] for p in FLAGS.pooled]
        for record in runs[-1]:
            if record["model"] in FLAGS.models:
                r = pooled([m for run in runs for m in run if m["model"] == record["model"]])
                lo, mid, hi = r["between"] or (math.nan,) * 3
                repriced = "-" if r["repriced"] is None else f"{r['repriced']:.2f}"
                print(f"{r['model']}: Spearman {r['spearman']:.2f} against {r['runs']} runs "
                      f"pooled (its own run's {r['run_spearman']:.2f}; repriced "
                      f"{repriced}; a model exact on each kind of variant "
                      f"{r['kinds_exact']:.2f}); the runs' measurements rank each other "
                      f"{lo:.2f}-{hi:.2f} (median {mid:.2f}); {r['left_out']} compiled "
                      f"otherwise left out", flush=True)
        return
    if FLAGS.rescore:
        if not FLAGS.cache_dir:
            raise SystemExit("--rescore prices from the run's kernel timings: give its "
                             "--cache_dir")
        for record in json.loads(Path(FLAGS.rescore).read_text())["models"]:
            if record["model"] in FLAGS.models:
                r = rescore(record, FLAGS.cache_dir)
                print(f"{r['model']}: Spearman {r['spearman']:.2f} (the run's "
                      f"{r['run_spearman']:.2f}), decided pairs right "
                      f"{r['decided_pairs_right']} of {r['decided_pairs']}, speed-up error "
                      f"median {r['speedup_error_median']:.0%} / max "
                      f"{r['speedup_error_max']:.0%} (the run's median "
                      f"{r['run_speedup_error_median']:.0%}); kernels and programs "
                      f"timed {r['timed']}", flush=True)
        return
    with tempfile.TemporaryDirectory() as fresh:
        run(FLAGS.cache_dir or fresh)


if __name__ == "__main__":
    app.run(main)
