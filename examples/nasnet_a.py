"""Benchmark NASNet-A (normal and reduction cells): jax.jit vs hlo_opt.jit.

    python examples/nasnet_a.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("nasnet_a"))
