"""Benchmark SqueezeNet 1.0 (fire modules): jax.jit vs hlo_opt.jit.

    python examples/squeezenet.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("squeezenet"))
