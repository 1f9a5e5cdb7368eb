"""Benchmark ResNeXt-50 (32 groups, widths 128/256/512/1024): jax.jit vs hlo_opt.jit.

    python examples/resnext50.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("resnext50"))
