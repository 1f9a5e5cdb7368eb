"""Benchmark the whole zoo: jax.jit vs hlo_opt.jit (and Enzyme-JAX when installed).

    python examples/bench_all.py                  # full configs, batch 1, NCHW CNNs
    python examples/bench_all.py --quick          # the small configs: a smoke run
    python examples/bench_all.py --train          # add training steps of BERT and ResNet-50
    python examples/bench_all.py --readme         # also rewrite README.md's Benchmarks table
    python examples/bench_all.py --layout=NHWC --readme    # the CNNs in NHWC (own table)

Writes, under --out: results.json (environment and one record per model), results.md
(the table) and speedup.png (a bar chart of the speed-ups with their min–max spread).
A model that fails is recorded as failed, and the run goes on; the exit status is 1 if
any did.
"""
from __future__ import annotations

import os

from absl import app, flags, logging

import bench
import models

flags.DEFINE_bool("quick", False, "Small model configurations (a few minutes on 2 cores).")
flags.DEFINE_list("models", list(models.NAMES), "Models to run.")
flags.DEFINE_string("out", "results", "Directory for results.json, results.md, speedup.png.")
flags.DEFINE_bool("readme", False, "Rewrite the table between the README's bench markers.")
FLAGS = flags.FLAGS

TRAIN_MODELS = ("resnet50", "bert")


def markdown(records: list[dict], env: dict) -> str:
    return "\n".join([
        f"Measured on **{env['device_kind']}** ({env['platform']}; host CPU "
        f"{env['cpu_model'] or 'unknown'}, {env['cpu_count']} cores), jax {env['jax']}"
        + (f", enzyme-ad {env['enzyme_ad']}" if env["enzyme_ad"] else "")
        + f", {env['date']}, by `{bench.command_line().strip()}`.",
        "Speed-up = median over interleaved rounds of (jax.jit time / contender time); "
        "min–max in brackets.",
        "",
        bench.table(records),
        ""])


def chart(records: list[dict], env: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in records if "error" not in r]
    labels = [f"{r['model']}\n{bench.config_text(r['config'])}" for r in done]
    contenders = [c for c in ("hlo_opt", "enzyme") if any(c in r["speedup"] for r in done)]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(done) + 2), 4.5))
    width = 0.8 / max(1, len(contenders))
    for i, name in enumerate(contenders):
        xs = [j + (i - (len(contenders) - 1) / 2) * width for j in range(len(done))]
        s = [r["speedup"].get(name, {"median": 0, "min": 0, "max": 0}) for r in done]
        med = [v["median"] for v in s]
        err = [[m - v["min"] for m, v in zip(med, s)], [v["max"] - m for m, v in zip(med, s)]]
        ax.bar(xs, med, width, yerr=err, capsize=3, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(done)), labels, fontsize=7)
    ax.set_ylabel("speed-up over jax.jit")
    ax.set_title(f"{env['device_kind']} ({env['platform']}), jax {env['jax']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv):
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    bench.refuse_unused("batch", "layout", "dtype", "repeats", "search", "time_limit", "small",
                        "train", "seed")        # its records are under --out, not --json
    bench.quiet_logs()
    unknown = set(FLAGS.models) - set(models.NAMES)
    if unknown:
        raise SystemExit(f"unknown models {sorted(unknown)}; the zoo has {models.NAMES}")
    config = dict(bench.flag_config(), small=FLAGS.quick or FLAGS.small, train=False)
    runs = [(name, config) for name in FLAGS.models]
    if FLAGS.train:
        runs += [(name, dict(config, train=True)) for name in TRAIN_MODELS
                 if name in FLAGS.models]
    records = []
    for name, cfg in runs:
        logging.warning("benchmarking %s", name)
        try:
            records.append(bench.run(name, **cfg))
        except Exception as exc:  # noqa: BLE001 - record it, run the rest
            logging.error("%s failed: %s", name, exc)
            records.append(bench.failed(name, exc, **cfg))
        print(bench.table(records[-1:]).splitlines()[-1], flush=True)

    env = bench.environment()
    os.makedirs(FLAGS.out, exist_ok=True)
    bench.write_json(os.path.join(FLAGS.out, "results.json"), records, command=bench.command_line())
    text = markdown(records, env)
    with open(os.path.join(FLAGS.out, "results.md"), "w") as f:
        f.write(text)
    chart(records, env, os.path.join(FLAGS.out, "speedup.png"))
    if FLAGS.readme:
        bench.rewrite_readme("bench_all" if FLAGS.layout == "NCHW" else "bench_all_nhwc", text)
    print(text)
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    app.run(main)
