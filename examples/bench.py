"""The benchmark harness: one zoo model under `jax.jit` and `hlo_opt.jit`, side by side in
one process, on the same inputs.

Method (what a careful benchmarker does, so every script does it the same way):
- the first call of each contender is timed on its own (compile, or optimise + compile);
- outputs are compared with `jax.jit`'s (max abs and relative error, within a tolerance
  scaled to the dtype, or, where jax.jit's own matmuls are reduced-precision as TF32 on
  a GPU, as close to a full-precision run as jax.jit's output: `hlo_opt.check`);
- after a warm-up, the contenders are timed **interleaved** — A B, then B A, and so on —
  every call blocked until ready; each sample averages enough calls to last ~50 ms;
- the speed-up is the median of the per-pair ratios (jax.jit time / contender time),
  with the min and max shown so the noise is visible.

If `enzyme_ad` is importable, `jax.jit(enzyme_jax_ir()(fn))` (Enzyme-JAX's default
StableHLO pipeline) is a third contender; if not, its columns are left out.
"""
from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import traceback
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from absl import logging as absl_logging

import hlo_opt
import models
from hlo_opt import compile_options
from hlo_opt.check import agreement, differs, tolerance
from hlo_opt.cost.measure import least_call, per_call
from hlo_opt.cost.pairing import settle as settle_calls
from hlo_opt.cost.model import cpu_model, device_header

flags.DEFINE_integer("batch", 1, "Batch size.")
flags.DEFINE_enum("layout", "NCHW", ["NCHW", "NHWC"], "Layout of the CNNs (others ignore it).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Weights and inputs dtype.")
flags.DEFINE_integer("repeats", 20, "Interleaved timing rounds per contender.")
flags.DEFINE_enum("search", "auto", list(hlo_opt.options.SEARCHES), "hlo_opt search algorithm.")
flags.DEFINE_float("time_limit", None, "hlo_opt search time limit in seconds.")
flags.DEFINE_string("json", None, "Also write the result(s) to this JSON file.")
flags.DEFINE_bool("small", False, "Use the model's small test configuration.")
flags.DEFINE_bool("train", False, "Time a training step (value_and_grad of a loss).")
flags.DEFINE_integer("seed", 0, "Seed of the random weights and inputs.")
FLAGS = flags.FLAGS

BASELINE = "jax.jit"
SAMPLE_SECONDS = 0.05
SIGN_LEVEL = 0.05      # `sign_of`: the sign test's level


def environment() -> dict:
    """What the numbers were measured on."""
    device = jax.devices()[0]
    return {"platform": device.platform, "device_kind": device.device_kind,
            "device_count": jax.device_count(), "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(),
            "host": device_header().get("host"),  # family, cache size: two "AMD EPYC" apart
            "machine": platform.machine(), "python": platform.python_version(),
            "jax": jax.__version__, "hlo_opt": getattr(hlo_opt, "__version__", "dev"),
            "enzyme_ad": _version("enzyme-ad"),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def train_step(fn: Callable) -> Callable:
    """`value_and_grad` of a softmax cross-entropy (class 0 as the label) of `fn`'s
    output with respect to the params: one training step's work."""
    def loss(params, *inputs):
        out = fn(params, *inputs).astype(jnp.float32)
        return -jnp.mean(jax.nn.log_softmax(out, axis=-1)[..., 0])
    return jax.value_and_grad(loss)


def _call(f, args):
    return jax.block_until_ready(f(*args))


def _first_call(f, args) -> tuple[object, float]:
    start = time.perf_counter()
    out = _call(f, args)
    return out, time.perf_counter() - start


def interleaved(contenders: dict[str, Callable], args, repeats: int, *,
                settle: float = 0.0, within: float = 0.0, most: int = 0,
                least: bool = False) -> dict:
    """Time the contenders in alternating order (A B, B A, ...); see the module doc.
    The first contender is the baseline the ratios are taken against.

    `within`: after the `repeats` rounds, more rounds, up to `most` in all, while the
    rounds so far and one more of their average length fit in `within` seconds: a
    program quick to time is measured more precisely in the same time a slow one takes.

    `settle`: each sample starts after untimed calls lasting this many seconds (at
    least one call), so that it times a program run again and again, as a user runs
    it: a short program switched to runs slow for tens of calls (`pairing.paired`).
    With `least`, a sample is instead the least call of a turn of `settle` seconds
    (`least_call`), every call of it timed.
    Among 24 SRU variants, the dots split in two read 1.22x the original timed after
    one untimed call (12 calls a sample), and 1.66x run alone for 60 calls after ten
    (medians of 9 rounds, `/tmp/s19/sru_blocks.py`). Among many contenders, a
    program's own arrays (weights it computed once) are also out of the caches by its
    turn, while those the others share are not."""
    for f in contenders.values():           # warm-up
        _call(f, args)
    slowest = max(per_call(f, args, 1) for f in contenders.values())
    number = max(1, math.ceil(SAMPLE_SECONDS / max(slowest, 1e-9)))

    def turn(name):
        if least:
            return least_call(contenders[name], args, settle)
        if settle:
            settle_calls(contenders[name], args, settle)
        return per_call(contenders[name], args, number)
    return summary(rounds(turn, list(contenders), repeats, within=within, most=most), number)


def rounds(turn: Callable[[object], float], names: list, repeats: int, *,
           within: float = 0.0, most: int = 0) -> dict[object, list[float]]:
    """Each name's samples, `turn(name)` once a round, the rounds in alternating order
    (`interleaved`, whose `within` and `most` these are)."""
    samples = {name: [] for name in names}
    start, r = time.perf_counter(), 0
    while r < repeats or (0 < r < most and (time.perf_counter() - start) * (r + 1) / r <= within):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(turn(name))
        r += 1
    return samples


def summary(samples: dict[object, list[float]], number: int = 1) -> dict:
    """`interleaved`'s result from its samples: the first name is the baseline."""
    names = list(samples)
    base = samples[names[0]]
    result = {"number": number, "repeats": len(base), "ms": {}, "speedup": {}}
    for name in names:
        result["ms"][name] = statistics.median(samples[name]) * 1e3
        if name == names[0]:
            continue
        ratios = [b / t for b, t in zip(base, samples[name])]
        result["speedup"][name] = {"median": statistics.median(ratios),
                                   "min": min(ratios), "max": max(ratios), "ratios": ratios}
    return result


def sign_of(ratios, level: float = SIGN_LEVEL) -> int:
    """+1 (a win) or -1 (a loss) when the per-round speed-ups fall on one side of 1 more
    often than chance would put them there (a two-sided sign test at `level`); 0 when
    this device cannot tell the two programs apart, so there is no sign to call."""
    above = sum(r > 1 for r in ratios)
    below = sum(r < 1 for r in ratios)
    n, k = above + below, max(above, below)
    if n == 0:
        return 0
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n)
    return 0 if p >= level else (1 if above > below else -1)


def _series(series, each: bool = False):
    """(family, operations, seconds) per scaling series of two sizes or more: the median
    seed's seconds, or with `each` every seed's (`runs`, where a point has them)."""
    for family in dict.fromkeys(s["series"] for s in series):
        points = [(s["ops"], t) for s in series if s["series"] == family
                  for t in (s.get("runs", [s["seconds"]]) if each else [s["seconds"]])]
        if len({ops for ops, _ in points}) > 1:
            yield family, *np.array(points, dtype=float).T


def growth(series) -> dict[str, float]:
    """Per series, the least-squares slope of log seconds against log operations: 1 is
    time linear in the graph's size, above 1 faster than linear (OCGGS Fig. 4's claim
    is at most linear). The median seed's seconds of each point."""
    return {family: float(np.polyfit(np.log(ops), np.log(seconds), 1)[0])
            for family, ops, seconds in _series(series)}


def line(series) -> dict[str, tuple[float, float]]:
    """Per series, the least-squares line of seconds on operations: (seconds at no
    operation, seconds per operation). Read with `growth`: time on a line through a
    negative intercept is linear in the size (each operation adds the same seconds)
    yet reads a log-log slope above 1, more the narrower the series; a search whose
    work sits in the repeated blocks, not in the stem they are added to, is such a
    line."""
    return {family: (float(a), float(b)) for family, ops, seconds in _series(series)
            for b, a in [np.polyfit(ops, seconds, 1)]}


def bend(series) -> dict[str, tuple[float, float, float, float]]:
    """Per series, whether the seconds an operation adds grow with the size: the least-
    squares parabola of every seed's seconds on operations (`runs`, else the median
    seed's), read as the seconds per operation it gives at the series' smallest and
    largest size, and the 95% interval of their difference (nan with too few runs for
    one). Growth at most linear is a difference whose interval is not above zero; the
    log-log slope cannot say it where a stem the blocks are added to costs less per
    operation than the blocks do (`line`)."""
    out = {}
    for family, x, y in _series(series, each=True):
        if len(set(x)) < 3:
            continue
        span = x.max() - x.min()
        if len(x) > 5:                  # polyfit's covariance wants more points than 5
            (c, b, _), cov = np.polyfit(x, y, 2, cov=True)
            half = 1.96 * 2 * span * float(np.sqrt(cov[0, 0]))
        else:
            (c, b, _), half = np.polyfit(x, y, 2), math.nan
        out[family] = (float(b + 2 * c * x.min()), float(b + 2 * c * x.max()),
                       float(2 * c * span - half), float(2 * c * span + half))
    return out


def ends(series, resamples: int = 2000) -> dict[str, tuple[float, float, float]]:
    """Per series, the mean seconds per operation at its largest size over those at its
    smallest, from every seed's run (`runs`), with the 95% interval of a bootstrap over
    each end's seeds (seeded: the same runs give the same interval); nan interval with
    one run at an end. An interval whose top is at most 1 shows time at most linear
    between the ends whatever the series' intercept: a stem dearer per operation than
    the blocks (a positive intercept) lowers the ratio; a cheaper one (negative) raises
    it, so a ratio above 1 is not growth faster than linear by itself (`bend` is for
    that)."""
    rng = np.random.default_rng(0)
    out = {}
    for family in dict.fromkeys(s["series"] for s in series):
        points = sorted((s for s in series if s["series"] == family), key=lambda s: s["ops"])
        if points[0]["ops"] == points[-1]["ops"]:
            continue
        low, high = (np.asarray(p.get("runs", [p["seconds"]]), float) / p["ops"]
                     for p in (points[0], points[-1]))
        ratio = float(high.mean() / low.mean())
        if min(len(low), len(high)) < 2:
            out[family] = (ratio, math.nan, math.nan)
            continue
        draws = [rng.choice(high, len(high)).mean() / rng.choice(low, len(low)).mean()
                 for _ in range(resamples)]
        lo, hi = np.percentile(draws, [2.5, 97.5])
        out[family] = (ratio, float(lo), float(hi))
    return out


def at_most_linear(series) -> dict[str, list[str]]:
    """Per series, the tests that show its time growing at most linearly: "ends" where
    the seconds per operation at the largest size are shown at most those at the
    smallest (`ends`' interval tops at 1 or under: at most proportional to the size),
    "bend" where the seconds an operation adds are shown to fall with the size (`bend`'s
    interval lies below zero: the time is concave, under its tangent at the largest
    size, a line). Empty where neither shows it. Neither can show a straight line
    through a negative intercept (a stem cheaper per operation than the blocks added to
    it): both intervals straddle their bound however many seeds."""
    ends_, bend_ = ends(series), bend(series)
    return {family: [name for name, shown in
                     (("ends", family in ends_ and ends_[family][2] <= 1),
                      ("bend", family in bend_ and bend_[family][3] < 0)) if shown]
            for family in dict.fromkeys(s["series"] for s in series)
            if family in ends_ or family in bend_}


def nlogn(series) -> dict[str, float]:
    """Per series, the ratio `ends` reads for time proportional to n log n in the
    operations n: log(largest) / log(smallest). A time exactly linear reads 1 at `ends`,
    so its interval straddles 1 however many seeds; an interval whose top is under this
    ratio tells linear from n log n, the next growth up (1.14 for Inception's 84 -> 156
    operations)."""
    out = {}
    for family in dict.fromkeys(s["series"] for s in series):
        ops = [s["ops"] for s in series if s["series"] == family]
        if min(ops) != max(ops):
            out[family] = math.log(max(ops)) / math.log(min(ops))
    return out


def timed(model) -> tuple[int, int]:
    """Kernels and whole programs a cost model has timed so far (cache misses)."""
    return getattr(model, "measured", 0), getattr(model, "programs", 0)


def until_quiet(model, most: int, run: Callable[[float], object],
                timing: float = math.inf) -> tuple[object, int]:
    """Calls `run(seconds of timing left)` until a call times nothing new (`timed`),
    `most` calls at most, or until the calls have spent `timing` seconds timing, all
    together (`model.measuring`); returns (the last call's result, the calls made)."""
    for calls in range(1, most + 1):
        before, measuring = timed(model), getattr(model, "measuring", 0.0)
        out = run(timing)
        timing -= getattr(model, "measuring", 0.0) - measuring
        if timed(model) == before or timing <= 0:
            break
    return out, calls


def enzyme(fn: Callable) -> Callable | None:
    """Enzyme-JAX's default pipeline around `fn`, or None when it is not installed."""
    try:
        from enzyme_ad.jax import enzyme_jax_ir
    except ImportError:
        return None
    return jax.jit(enzyme_jax_ir()(fn))


def run(name: str, *, batch: int = 1, layout: str | None = "NCHW", dtype: str = "float32",
        small: bool = False, train: bool = False, repeats: int = 20, search: str = "auto",
        time_limit: float | None = None, seed: int = 0) -> dict:
    """Benchmark one model; returns a JSON-ready record."""
    layout = layout if name in models.CNNS else None
    fn, params, inputs = models.build(name, layout=layout, batch=batch, dtype=dtype,
                                      small=small, seed=seed)
    if train:
        fn = train_step(fn)
    args = (params, *inputs)
    optimized = hlo_opt.jit(fn, frozen_argnums=() if train else (0,), search=search,
                            time_limit=time_limit)
    contenders = {BASELINE: jax.jit(fn), "hlo_opt": optimized}
    peer = enzyme(fn)
    if peer is not None:
        contenders["enzyme"] = peer

    record = {"model": name,
              "config": {"batch": batch, "layout": layout, "dtype": dtype, "small": small,
                         "train": train, "seed": seed},
              "tolerance": tolerance(dtype), "first_call_s": {}, "max_abs_error": {},
              "rel_error": {}, "agree": {}, "failures": {}}
    reference, record["first_call_s"][BASELINE] = _first_call(contenders[BASELINE], args)
    for label in list(contenders)[1:]:
        try:
            out, record["first_call_s"][label] = _first_call(contenders[label], args)
            err, rel = agreement(reference, out)
        except Exception as exc:  # noqa: BLE001 - a peer failing is a result, not a crash
            if label == "hlo_opt":
                raise
            record["failures"][label] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            del contenders[label]
            continue
        record["max_abs_error"][label], record["rel_error"][label] = err, rel
        record["agree"][label] = rel <= record["tolerance"] or differs(
            contenders[BASELINE], args, jax.tree.leaves(reference), jax.tree.leaves(out)) is None

    report = optimized.explain(*args)
    record.update(optimise_s=record["first_call_s"]["hlo_opt"],
                  search_s=report.search_seconds, applied=dict(report.applied),
                  fell_back=report.fell_back, fallback_reason=report.reason,
                  stop_reason=report.stop_reason,
                  compiled_with=compile_options.describe(report.compiler_options))
    record.update(interleaved(contenders, args, repeats))
    return record


def failed(name: str, exc: BaseException, **config) -> dict:
    """The record of a model whose benchmark raised: kept, not hidden."""
    return {"model": name, "config": config,
            "error": "".join(traceback.format_exception_only(exc)).strip()}


# -- reporting ------------------------------------------------------------------------------

def config_text(config: dict) -> str:
    parts = [f"b{config['batch']}", config.get("layout") or "",
             {"float32": "f32", "bfloat16": "bf16"}.get(config["dtype"], config["dtype"])]
    if config.get("small"):
        parts.append("small")
    if config.get("train"):
        parts.append("train")
    return " ".join(p for p in parts if p)


def _speedup_text(s: dict) -> str:
    return f"{s['median']:.2f}x ({s['min']:.2f}–{s['max']:.2f})"


def _applied_text(applied: dict) -> str:
    return ", ".join(f"{k}×{v}" for k, v in sorted(applied.items())) or "none"


def table(records: list[dict]) -> str:
    """One Markdown table of the records (the enzyme columns only if any record has it)."""
    peer = any("enzyme" in r.get("ms", {}) or "enzyme" in r.get("failures", {})
               for r in records)
    head = ["model", "config", "jax.jit ms", "hlo_opt ms", "speedup (min–max)",
            "max rel err", "optimise s", "search s", "rules applied"]
    if peer:
        head += ["enzyme ms", "enzyme speedup"]
    rows = [head, ["---"] * len(head)]
    for r in records:
        if "error" in r:
            rows.append([r["model"], config_text(r["config"]), "failed: " + r["error"]]
                        + [""] * (len(head) - 3))
            continue
        row = [r["model"], config_text(r["config"]), f"{r['ms'][BASELINE]:.3f}",
               f"{r['ms']['hlo_opt']:.3f}", _speedup_text(r["speedup"]["hlo_opt"]),
               f"{r['rel_error']['hlo_opt']:.1e}", f"{r['optimise_s']:.2f}",
               f"{r['search_s']:.2f}", _applied_text(r["applied"])
               + (f" (kept the original: {r['fallback_reason'][:60]})" if r.get("fell_back")
                  else "")]
        if peer:
            if "enzyme" in r["ms"]:
                row += [f"{r['ms']['enzyme']:.3f}", _speedup_text(r["speedup"]["enzyme"])]
            else:
                row += ["failed", r["failures"].get("enzyme", "")[:60]]
        rows.append(row)
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def write_json(path: str, records: list[dict], **extra) -> None:
    with open(path, "w") as f:
        json.dump({"environment": environment(), **extra, "results": records}, f, indent=1)


def command_line() -> str:
    """How this script was run, for the record."""
    return " ".join(["python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])


README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def markers(section: str) -> tuple[str, str]:
    return f"<!-- {section}:begin -->", f"<!-- {section}:end -->"


def write_report(name: str, payload: dict, text: str, out: str, readme: bool) -> None:
    """`out`/`name`.json (the payload) and .md (the text); with `readme`, the text also
    replaces the README's `name` section. Prints the text."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(payload, f, indent=1)
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write(text)
    if readme:
        rewrite_readme(name, text)
    print(text)


def rewrite_readme(section: str, text: str, path: str = README) -> None:
    """Replace what stands between the README's markers of `section` by `text`."""
    with open(path) as f:
        readme = f.read()
    begin, end = markers(section)
    pattern = re.compile(f"{re.escape(begin)}.*?{re.escape(end)}", re.S)
    if not pattern.search(readme):
        raise SystemExit(f"{path} has no {begin} ... {end} section")
    with open(path, "w") as f:
        f.write(pattern.sub(lambda _: f"{begin}\n{text}{end}", readme))


def flag_config() -> dict:
    return dict(batch=FLAGS.batch, layout=FLAGS.layout, dtype=FLAGS.dtype, small=FLAGS.small,
                train=FLAGS.train, repeats=FLAGS.repeats, search=FLAGS.search,
                time_limit=FLAGS.time_limit, seed=FLAGS.seed)


def refuse_unused(*used: str) -> None:
    """Stop where the command line sets a flag of this module (they are every script's,
    as the scripts import it) that the running script does not read: a script that
    took `--dtype=bfloat16` and timed float32 would report the wrong configuration."""
    given = sorted(f.name for f in FLAGS.get_flags_for_module(sys.modules[__name__])
                   if f.present and f.name not in used)
    if given:
        script = os.path.basename(sys.argv[0]) if sys.argv else "this script"
        raise app.UsageError(
            f"{script} does not take {', '.join('--' + g for g in given)}: flags of "
            f"bench.py it does not read (it reads {', '.join('--' + u for u in used) or 'none'})")


def quiet_logs() -> None:
    """Warnings and errors only (jax logs its backend probing at INFO), unless the user
    asked for a --verbosity."""
    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)


def main_for(name: str) -> Callable:
    """The absl `main` of one model's script."""
    def main(argv):
        if len(argv) > 1:
            raise SystemExit(f"unexpected arguments: {argv[1:]}")
        quiet_logs()
        record = run(name, **flag_config())
        env = environment()
        print(f"{name} on {env['device_kind']} ({env['platform']}), jax {env['jax']}")
        print(table([record]))
        for label, ok in record["agree"].items():
            if not ok:
                print(f"WARNING: {label} output differs from jax.jit beyond "
                      f"{record['tolerance']:g} relative")
        if FLAGS.json:
            write_json(FLAGS.json, [record])
    return main
