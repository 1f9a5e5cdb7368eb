"""Benchmark ResNet-50 (bottleneck blocks 3-4-6-3): jax.jit vs hlo_opt.jit.

    python examples/resnet50.py [--batch=1 --layout=NCHW --dtype=float32 --repeats=20 --json=out.json]
"""
from absl import app

import bench

if __name__ == "__main__":
    app.run(bench.main_for("resnet50"))
