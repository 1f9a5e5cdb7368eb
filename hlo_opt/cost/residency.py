"""Which of a kernel's operands come from main memory, not from the cache, each call (CPU).

A kernel timed alone runs on the same operands call after call, so the ones that fit
in the last-level cache stay there. In the program, a parameter (an input, or a weight
computed once by `frozen_argnums`) is read once a call; when the program's parameters
together overflow the last-level cache, each one has been evicted by the others since
the last call, and is read from DRAM. Measured on an AMD host, a 64x4096 @
4096x1024 dot, its weight read hot / from DRAM (8 weights in turn): K x N 3.15 / 3.39
ms, N x K 3.24 / 3.98 ms; 64x1024 @ 1024x1024, 0.77 / 0.87 and 0.83 / 0.97 ms. Timed
hot, BERT's weights turned N x K were priced 1% dearer than K x N and ran 16% slower.

`cold` marks, in a program whose parameters overflow the cache, the operands each
kernel reads that are parameters; `measure.time_graphs` times such a kernel with those
operands in turn from enough copies to overflow the cache again. Operands smaller
together than `COLD_MIN` are left hot: their reads cost too little to time apart.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Collection, Sequence

from hlo_opt.cost.partition import Kernel
from hlo_opt.ir import Graph, Node, Value

DEFAULT_LLC = 32 << 20      # bytes, where the OS does not say
SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"     # Linux's index0..N, one per cache
COLD_MIN = 1 << 20          # bytes a kernel's cold operands sum to, at least


@functools.cache
def last_level_cache() -> int:
    """Bytes of the largest cache of this host's first CPU (Linux's sysfs; `DEFAULT_LLC`
    where it says nothing). The directory holds files beside its `index*` folders
    (`uevent`): only the folders are read, each on its own. (Until 2026-12-06 the file
    made every Linux host read the default; the AMD hosts' L3 is 8 MiB.)"""
    base = SYSFS_CACHE
    try:
        entries = [e for e in os.listdir(base) if e.startswith("index")]
    except OSError:
        return DEFAULT_LLC
    sizes = []
    for index in entries:
        try:
            with open(os.path.join(base, index, "size")) as f:
                text = f.read().strip()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KM")) * scale)
        except (OSError, ValueError):
            continue
    return max(sizes, default=DEFAULT_LLC)


def cold(graph: Graph, kernels: Sequence[Kernel], precomputed: Sequence[bool],
         weights: Collection[Node]) -> list[tuple[Value, ...]]:
    """For each kernel, the operands it reads from main memory each call: none unless
    the program's parameters (the graph's inputs and the `weights` computed once that
    kernels run per call read) overflow the last-level cache; then its parameters, if
    they come to `COLD_MIN` bytes."""
    params = [tuple(v for v in k.inputs if v.node.op == "input" or v.node in weights)
              if not pre else () for k, pre in zip(kernels, precomputed)]
    total = sum(v.type.nbytes for v in {v for p in params for v in p})
    if total <= last_level_cache():
        return [()] * len(kernels)
    return [p if sum(v.type.nbytes for v in p) >= COLD_MIN else () for p in params]
