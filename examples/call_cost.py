"""What an `hlo_opt.jit` call costs beyond the program it runs.

    python examples/call_cost.py                        # the zoo, full size
    python examples/call_cost.py --models=bert,sru --small --repeats=9

For each model: `hlo_opt.jit` with the weights frozen (argument 0), its first call, then
four contenders timed interleaved (`bench.interleaved`, every call blocked until ready,
each sample after `SETTLE` seconds of untimed calls):
jax.jit of the model, the `hlo_opt.jit` call, the per-call program it runs called
directly on its arguments (what measure_final times), and jax.jit of the model on its
flat leaves (jax.jit's program without the pytree). The call's time minus its program's
is what the call itself adds: the Python of `hlo_opt.jit` and the pytree. On a GPU, where a
batch-1 model runs in about a millisecond and the host's Python is slow, that is a few
percent of the call (README, "On a GPU: what an `hlo_opt.jit` call costs").

Writes, under --out: results.json and results.md.
"""
from __future__ import annotations

import os
import time

import jax
from absl import app, flags

import bench
import hlo_opt
import models
from hlo_opt import frozen
from hlo_opt.check import agreement, tolerance

flags.DEFINE_list("models", list(models.NAMES), "Models to run.")
flags.DEFINE_string("out", "results/call_cost", "Directory for results.json and results.md.")
FLAGS = flags.FLAGS

SETTLE = 0.25     # seconds of untimed calls before each sample: a short program switched
                  # to runs slow for its first calls (`bench.interleaved`)
LABELS = ("jax.jit", "hlo_opt.jit call", "its per-call program", "jax.jit on flat leaves")


def run(name: str, *, small: bool, repeats: int, seed: int,
        time_limit: float | None = None) -> dict:
    layout = "NCHW" if name in models.CNNS else None
    fn, params, inputs = models.build(name, layout=layout, small=small, seed=seed)
    args = (params, *inputs)
    optimized = hlo_opt.jit(fn, frozen_argnums=(0,), time_limit=time_limit)
    start = time.perf_counter()
    jax.block_until_ready(optimized(*args))
    first = time.perf_counter() - start
    report = optimized.explain(*args)
    leaves = jax.tree.leaves(args)
    tree = jax.tree.structure(args)
    flat = jax.jit(lambda *xs: fn(*jax.tree.unflatten(tree, xs)))
    runner = _runner(optimized, args)
    if runner is None:            # the call runs the original under jax.jit
        def program(*_):
            return flat(*leaves)
    else:
        runtime, runtime_args = runner.runtime_args(leaves)

        def program(*_):
            return runtime(*runtime_args)
    contenders = dict(zip(LABELS, (jax.jit(fn), optimized, program,
                                   lambda *_: flat(*leaves))))
    reference = contenders[LABELS[0]](*args)
    rel = max(agreement(reference, f(*args))[1] for f in list(contenders.values())[1:])
    timing = bench.interleaved(contenders, args, repeats, settle=SETTLE)
    ms = timing["ms"]
    return {"model": name, "small": small, "first_call_s": first,
            "outcome": _outcome(report), "ms": ms, "rel_error": rel,
            "tolerance": tolerance(jax.tree.leaves(reference)[0].dtype),
            "speedup": {k: v["median"] for k, v in timing["speedup"].items()},
            "call_us": (ms[LABELS[1]] - ms[LABELS[2]]) * 1e3}


def _runner(optimized, args) -> frozen.Runner | None:
    """The signature's own `frozen.Runner` (hlo_opt's internals: this script measures
    them). A second compile of the same per-call program is another program instance:
    on NasRNN, 3% faster than the call's own, read side by side (`/tmp/s56/nas_gap.py`)."""
    _, _, key = optimized._signature(args, {})
    return optimized._entries[key].runner


def _outcome(report) -> str:
    if report.fell_back:
        return f"original kept ({report.reason.split(':')[0]})"
    applied = report.applied
    if len(applied) > 3:
        return f"{sum(applied.values())} rewrites by {len(applied)} rules"
    return ", ".join(f"{k}x{v}" for k, v in sorted(applied.items())) or "nothing rewritten"


def table(records: list[dict]) -> str:
    head = ["model", "outcome", "jax.jit ms", *(f"{k} (speed-up)" for k in LABELS[1:]),
            "the call adds, us"]
    rows = [[r["model"], r["outcome"], f"{r['ms'][LABELS[0]]:.3f}",
             *(f"{r['speedup'][k]:.3f}x" for k in LABELS[1:]), f"{r['call_us']:.1f}"]
            for r in records]
    return "\n".join("| " + " | ".join(row) + " |"
                     for row in [head, ["---"] * len(head), *rows])


def main(argv):
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    bench.refuse_unused("repeats", "seed", "small", "time_limit")
    bench.quiet_logs()
    records = []
    for name in FLAGS.models:
        records.append(run(name, small=FLAGS.small, repeats=FLAGS.repeats, seed=FLAGS.seed,
                           time_limit=FLAGS.time_limit))
        print(table(records[-1:]).splitlines()[-1], flush=True)
    env = bench.environment()
    text = (f"Measured on **{env['device_kind']}** ({env['platform']}; host CPU "
            f"{env['cpu_model'] or 'unknown'}, {env['cpu_count']} cores), jax {env['jax']}, "
            f"{env['date']}, by `{bench.command_line().strip()}`.\n\n{table(records)}\n")
    os.makedirs(FLAGS.out, exist_ok=True)
    bench.write_json(os.path.join(FLAGS.out, "results.json"), records,
                     command=bench.command_line())
    with open(os.path.join(FLAGS.out, "results.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    app.run(main)
