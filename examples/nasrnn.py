"""Benchmark the NAS recurrent cell (hidden 512, 5 steps): jax.jit vs hlo_opt.jit.

    python examples/nasrnn.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("nasrnn"))
