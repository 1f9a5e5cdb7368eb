"""Benchmark a BERT encoder (seq 64, hidden 1024, 16 heads, 8 layers): jax.jit vs hlo_opt.jit.

    python examples/bert.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("bert"))
