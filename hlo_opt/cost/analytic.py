"""The analytic half of the cost model: a roofline per kernel.

    seconds = max(FLOPs / peak, bytes moved / bandwidth) + launch

FLOPs are the op table's counts summed over the kernel; bytes are what the kernel reads
from outside and writes out (fused intermediates stay in registers and cache). On CPU,
XLA runs a convolution whose activations are not channels-last as transpose, NHWC
convolution, transpose; those copies are added as bytes. Peak and bandwidth come from
two microbenchmarks run once per device and cached (`calibrate`); `DEFAULT` holds fixed
numbers for deterministic tests.
"""
from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp

from hlo_opt import ops
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.measure import time_callable
from hlo_opt.cost.partition import Kernel
from hlo_opt.ir import Node

logger = logging.getLogger("hlo_opt")


@dataclasses.dataclass(frozen=True)
class Roofline:
    peak_flops: float      # FLOP/s
    bandwidth: float       # bytes/s
    launch: float          # seconds per kernel
    platform: str = "cpu"

    def kernel_seconds(self, kernel: Kernel) -> float:
        if kernel.kind == "free":
            return 0.0
        flops = sum(ops.get(n.op).flops(n) for n in kernel.nodes)
        views = {v for v, _ in kernel.views}      # (no copy: the buffer of another)
        moved = sum(v.type.nbytes for v in kernel.inputs) + \
            sum(v.type.nbytes for v in kernel.outputs if v not in views)
        # Relayout copies are kernels of their own: they add, not overlap.
        copies = sum(map(_relayout_bytes, kernel.nodes)) if self.platform == "cpu" else 0
        return max(flops / self.peak_flops, moved / self.bandwidth) + \
            copies / self.bandwidth + self.launch


def _relayout_bytes(node: Node) -> int:
    """Bytes XLA CPU copies to run this conv channels-last (0 if it already is)."""
    if node.op != "conv_general_dilated":
        return 0
    lhs, rhs, out = node.params["dimension_numbers"]
    last = len(lhs) - 1
    moved = 0
    if lhs[1] != last:
        moved += 2 * node.inputs[0].type.nbytes
    if out[1] != last:
        moved += 2 * node.types[0].nbytes
    if rhs[0] != last or rhs[1] != last - 1:
        moved += 2 * node.inputs[1].type.nbytes
    return moved


# Round numbers of a 2-core CPU, for tests that must not depend on the machine.
DEFAULT = Roofline(peak_flops=5e10, bandwidth=1e10, launch=1e-6)
LAUNCH = {"cpu": 1e-6, "gpu": 5e-6}
# Fixed numbers per platform, the same on every host of it: how long a program is, as
# `whole.rough` reads it to choose how to price it. A GPU's are round numbers under any
# recent datacenter GPU's: the zoo's models read 0.13-7.8 ms under them, so all stay
# short there (they run in 0.1-2.7 ms on an H100), as they were under a 5 ms line.
FIXED = {"cpu": DEFAULT,
         "gpu": Roofline(peak_flops=5e12, bandwidth=1e12, launch=LAUNCH["gpu"],
                         platform="gpu")}


def calibrate(header: dict, cache_dir=None) -> Roofline:
    """Peak FLOP/s (a 1024^3 f32 matmul) and bandwidth (an elementwise pass over 64 MiB),
    measured once per device and jax version, then read from the cache."""
    cache = Cache("roofline", header, cache_dir)
    platform = header.get("platform", "cpu")
    if "peak_flops" not in cache or "bandwidth" not in cache:
        n = 1024
        a = jnp.ones((n, n), jnp.float32)
        matmul = time_callable(jax.jit(jnp.matmul), (a, a), repeats=5)
        x = jnp.ones((16 * 2**20,), jnp.float32)
        stream = time_callable(jax.jit(lambda x: x * 2 + 1), (x,), repeats=5)
        cache.put("peak_flops", 2 * n**3 / matmul)
        cache.put("bandwidth", 2 * x.nbytes / stream)
        cache.flush()
        logger.info("hlo_opt: calibrated %s: %.3g FLOP/s, %.3g B/s", header,
                    cache.get("peak_flops"), cache.get("bandwidth"))
    return Roofline(float(cache.get("peak_flops")), float(cache.get("bandwidth")),
                    LAUNCH.get(platform, LAUNCH["gpu"]), platform)
