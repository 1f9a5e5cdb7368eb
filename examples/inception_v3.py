"""Benchmark Inception-v3: jax.jit vs hlo_opt.jit.

    python examples/inception_v3.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("inception_v3"))
