"""How long the first call of `hlo_opt.jit` takes, cold and with warm caches.

    python examples/first_call.py                    # every zoo model, NCHW, batch 1
    python examples/first_call.py --models=squeezenet,nasrnn --layout=NHWC

For each model, two fresh Python processes call `hlo_opt.jit(fn, frozen_argnums=(0,))`
once and time that call (capture, search, verify, measure_final, XLA compile, one run):
the first with an empty cache directory (cold: every kernel timed, the search run), the
second with the directory the first left behind (warm: the optimised graph read back).
jax.jit's own first call is timed in the same processes for scale, and the cold call's
outcome is shown: the speed-up measure_final measured, or that it kept the original.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

import bench
import models

flags.DEFINE_list("models", list(models.NAMES), "Models to run.")
FLAGS = flags.FLAGS

CHILD = """
import json, sys, time
sys.path.insert(0, {examples!r})
import jax, hlo_opt, models
name, layout, batch = {name!r}, {layout!r}, {batch!r}
fn, params, inputs = models.build(name, layout=layout if name in models.CNNS else None,
                                  batch=batch)
start = time.perf_counter()
jax.block_until_ready(jax.jit(fn)(params, *inputs))
plain = time.perf_counter() - start
ours = hlo_opt.jit(fn, frozen_argnums=(0,))
start = time.perf_counter()
jax.block_until_ready(ours(params, *inputs))
first = time.perf_counter() - start
report = ours.explain(params, *inputs)
print(json.dumps({{"first_s": first, "jax_jit_first_s": plain,
                   "stop_reason": report.stop_reason, "fell_back": report.fell_back,
                   "before": report.measured_before, "after": report.measured_after}}))
"""


def first_call(name: str, cache_dir: str) -> dict:
    code = CHILD.format(examples=os.path.dirname(os.path.abspath(__file__)), name=name,
                        layout=FLAGS.layout, batch=FLAGS.batch)
    env = dict(os.environ, HLO_OPT_CACHE_DIR=cache_dir)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def outcome(record: dict) -> str:
    if record["fell_back"]:
        return "kept the original"
    if record["before"] and record["after"]:
        return f"{record['before'] / record['after']:.2f}x measured"
    return "optimised (not timed)"


def main(argv):
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    bench.refuse_unused("batch", "layout")
    bench.quiet_logs()
    rows = ["| model | first call cold (s) | warm (s) | jax.jit first call (s) | warm run | "
            "cold outcome |", "| --- | --- | --- | --- | --- | --- |"]
    for name in FLAGS.models:
        with tempfile.TemporaryDirectory() as cache:
            cold, warm = first_call(name, cache), first_call(name, cache)
        rows.append(f"| {name} | {cold['first_s']:.1f} | {warm['first_s']:.1f} | "
                    f"{cold['jax_jit_first_s']:.1f} | {warm['stop_reason']} | {outcome(cold)} |")
        print(rows[-1], flush=True)
    env = bench.environment()
    print(f"\nMeasured on {env['device_kind']} ({env['cpu_model']}, {env['cpu_count']} cores), "
          f"jax {env['jax']}, {env['date']}, by `{bench.command_line()}`; layout "
          f"{FLAGS.layout}, batch {FLAGS.batch}.\n")
    print("\n".join(rows))


if __name__ == "__main__":
    app.run(main)
