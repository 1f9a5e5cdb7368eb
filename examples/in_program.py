"""Where the cost model and the whole program part: each library kernel's time inside
the program, from jax's profiler, next to the model's price of the same conv or dot.

    python examples/in_program.py                              # ResNeXt-50 relaid NHWC
    python examples/in_program.py --model=squeezenet --variant=original

The model prices every kernel timed alone (`hlo_opt.cost`); the program runs them one
after another, and XLA's CPU backend may group several convs into one library fusion
(`ynn_fusion`: ResNeXt-50's last two stages, 28 convs, are one). The profiler's trace
names each fusion; the compiled HLO gives its shape, its weight's shape and how many
convs and dots it holds. A fusion of one conv or dot is matched to the model's kernel of
the same output and weight shapes; fusions of several are compared, summed, with the
model's kernels no single fusion took. An NCHW network's convs read transposed copies
that the model prices inside each conv's kernel, so there only the sums compare. CPU
only (the library fusions are XLA CPU's).
"""
from __future__ import annotations

import collections
import glob
import re
import tempfile
import time

import jax
from absl import app, flags

import bench
import models
import variants as V
from hlo_opt import capture, cost, frozen

flags.DEFINE_string("model", "resnext50", "Zoo model.")
flags.DEFINE_enum("variant", "relaid", ["original", "relaid"], "The graph to look at.")
flags.DEFINE_integer("calls", 10, "Profiled calls (after ten untimed ones).")
FLAGS = flags.FLAGS

LIBRARY = ("ynn_fusion", "xnn_fusion", "onednn")
_PARAM = re.compile(r"%(\S+) = \w+\[([0-9,]*)\]\S* parameter\(")
_FUSION = re.compile(r"%((?:" + "|".join(LIBRARY) +
                     r")[\w.]*) = \w+\[([0-9,]*)\]\S* fusion\(([^)]*)\).*calls=%([\w.]+)")


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",") if d)


def library_fusions(hlo: str) -> dict[str, dict]:
    """The library fusions of a compiled module's entry computation: for each, its
    output shape, the shapes of the entry parameters it reads, in operand order (a
    conv's or dot's weight last, in a frozen program) and how many convolutions and dots its fused computation holds."""
    entry = hlo[hlo.index("\nENTRY"):]
    params = {name: _shape(dims) for name, dims in _PARAM.findall(entry)}
    out = {}
    for m in _FUSION.finditer(entry):
        body = re.search(r"\n%" + re.escape(m.group(4)) + r" [^\n]*\{\n(.*?)\n\}", hlo, re.S)
        body = body.group(1) if body else ""
        operands = [o.strip().lstrip("%") for o in m.group(3).split(",")]
        out[m.group(1)] = {"shape": _shape(m.group(2)),
                           "parameters": [params[o] for o in operands if o in params],
                           "convs": body.count(" convolution("), "dots": body.count(" dot(")}
    return out


def event_ms(fn, args, calls: int) -> tuple[dict[str, float], float]:
    """(milliseconds per call of each named event on XLA's threads, wall ms per call)."""
    for _ in range(10):
        jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            start = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
            wall = (time.perf_counter() - start) / calls * 1e3
        trace = jax.profiler.ProfileData.from_file(
            glob.glob(f"{d}/**/*.xplane.pb", recursive=True)[0])
    ms = collections.Counter()
    for plane in trace.planes:
        for line in plane.lines:
            if "XLA" not in line.name:
                continue
            for e in line.events:
                if not e.name.startswith("ThunkExecutor"):
                    ms[e.name] += e.duration_ns / 1e6 / calls
    return dict(ms), wall


def kernel_prices(priced) -> dict[tuple, list[float]]:
    """Model milliseconds of each run-time conv or dot kernel, by (output shape, weight
    shape)."""
    out = collections.defaultdict(list)
    for k in priced.kernels:
        for n in k.kernel.nodes:
            if not k.precomputed and n.op in ("conv_general_dilated", "dot_general"):
                out[(n.types[0].shape, n.inputs[1].type.shape)].append(k.seconds * 1e3)
    return out


def main(argv):
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    bench.refuse_unused("small")
    bench.quiet_logs()
    fn, params, inputs = models.build(FLAGS.model, small=FLAGS.small)
    leaves = jax.tree.leaves((params, *inputs))
    fixed = range(len(jax.tree.leaves(params)))
    graph = capture.capture(fn, (params, *inputs)).graph
    if FLAGS.variant == "relaid":
        graph = V.relaid(graph) or graph
    with tempfile.TemporaryDirectory() as tmp:
        priced = cost.Measured(tmp).cost(graph, fixed)
    pool = kernel_prices(priced)
    program, args = frozen.Runner(graph, fixed).runtime_args(list(leaves))
    fusions = library_fusions(program.lower(*args).compile().as_text())
    ms, wall = event_ms(program, args, FLAGS.calls)

    rows, several = [], []
    for name, f in sorted(fusions.items(), key=lambda kv: -ms.get(kv[0], 0.0)):
        key = (f["shape"], f["parameters"][-1] if f["parameters"] else ())
        if f["convs"] + f["dots"] == 1 and pool.get(key):
            rows.append((name, ms.get(name, 0.0), pool[key].pop(), f))
        else:
            several.append((name, ms.get(name, 0.0), f))
    left = sum(sum(v) for v in pool.values())
    print(f"{FLAGS.model} {FLAGS.variant}: {wall:.1f} ms a call run, {priced.total * 1e3:.1f} "
          f"ms priced; XLA's threads spent {sum(ms.values()):.1f} ms a call in named work")
    print(f"{'fusion':<16} {'in program':>10} {'model':>8}  shape / weight")
    for name, run, model, f in rows:
        print(f"{name:<16} {run:10.2f} {model:8.2f}  {f['shape']} / {f['parameters'][-1]}")
    for name, run, f in several:
        print(f"{name:<16} {run:10.2f} {'':>8}  {f['shape']}: {f['convs']} convs, "
              f"{f['dots']} dots")
    print(f"one-kernel fusions: {sum(r[1] for r in rows):.1f} ms in program, "
          f"{sum(r[2] for r in rows):.1f} ms priced")
    print(f"the other library fusions: {sum(s[1] for s in several):.1f} ms in program; "
          f"the model's conv and dot kernels none matched: {left:.1f} ms priced")
    rest = sum(v for k, v in ms.items() if not k.startswith(LIBRARY))
    print(f"everything else (loop fusions, copies): {rest:.1f} ms a call of thread time")


if __name__ == "__main__":
    app.run(main)
